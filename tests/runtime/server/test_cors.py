"""CORS: off by default; allowed origins, headers and methods from the config, preflights answered without
the API key, and the same settings in the vLLM translation."""

from __future__ import annotations

import httpx
import pytest

from model_optimizer.runtime.server.config import ServerConfig
from tests.runtime.server.live import start_server


def test_cors_preflight_and_headers(own_llm):
    live = start_server(own_llm, ServerConfig(allowed_origins=["https://app.example"], api_key="k"))
    try:
        preflight = httpx.options(
            live.url + "/v1/completions",
            headers={
                "Origin": "https://app.example",
                "Access-Control-Request-Method": "POST",
                "Access-Control-Request-Headers": "authorization, content-type",
            },
        )
        assert preflight.status_code == 200  # answered without the API key, as browsers send none
        assert preflight.headers["access-control-allow-origin"] == "https://app.example"
        assert "POST" in preflight.headers["access-control-allow-methods"]
        r = httpx.get(live.url + "/v1/models", headers={"Origin": "https://app.example", "Authorization": "Bearer k"})
        assert r.headers["access-control-allow-origin"] == "https://app.example"
        denied = httpx.options(
            live.url + "/v1/completions",
            headers={"Origin": "https://evil.example", "Access-Control-Request-Method": "POST"},
        )
        assert "access-control-allow-origin" not in denied.headers
        assert httpx.get(live.url + "/v1/models").status_code == 401  # the key still guards real requests
    finally:
        live.stop()


def test_credentials_only_when_allowed(own_llm):
    """--allow-credentials (vLLM's): the preflight and the answer say a browser may send cookies and keys;
    with "*" as the origins, the asking origin comes back (browsers refuse "*" with credentials)."""
    for allow in (False, True):
        live = start_server(own_llm, ServerConfig(allowed_origins=["*"], allow_credentials=allow))
        try:
            headers = {"Origin": "https://app.example"}
            preflight = httpx.options(
                live.url + "/v1/completions", headers={**headers, "Access-Control-Request-Method": "POST"}
            )
            answer = httpx.get(live.url + "/v1/models", headers=headers)
            for r in (preflight, answer):
                assert r.headers.get("access-control-allow-credentials") == ("true" if allow else None)
            assert answer.headers["access-control-allow-origin"] == ("https://app.example" if allow else "*")
        finally:
            live.stop()


def test_no_cors_by_default(client):
    r = client.get("/v1/models", headers={"Origin": "https://app.example"})
    assert "access-control-allow-origin" not in r.headers


def test_allowed_origins_config():
    assert ServerConfig(allowed_origins="https://a.example,https://b.example").allowed_origins == [
        "https://a.example",
        "https://b.example",
    ]
    assert ServerConfig(allowed_origins='["*"]').allowed_origins == ["*"]
    assert ServerConfig().allowed_origins is None
    with pytest.raises(ValueError, match="allowed_origins"):
        ServerConfig(allowed_origins="ftp://x")


def test_cors_preflight_allows_the_openai_js_sdk_headers(own_llm):
    """The official OpenAI JS SDK sends x-stainless-* headers; a preflight naming them must pass by default."""
    live = start_server(own_llm, ServerConfig(allowed_origins=["http://example.com"]))
    try:
        preflight = httpx.options(
            live.url + "/v1/chat/completions",
            headers={
                "Origin": "http://example.com",
                "Access-Control-Request-Method": "POST",
                "Access-Control-Request-Headers": "authorization, content-type, x-stainless-os, x-stainless-lang",
            },
        )
        assert preflight.status_code == 200, preflight.text
        allowed = preflight.headers["access-control-allow-headers"].lower()
        assert "x-stainless-os" in allowed and "x-stainless-lang" in allowed
    finally:
        live.stop()


def test_cors_allowed_headers_and_methods_can_be_narrowed(own_llm):
    config = ServerConfig(allowed_origins="http://example.com", allowed_headers="Content-Type", allowed_methods="POST")
    assert config.allowed_headers == ["Content-Type"] and config.allowed_methods == ["POST"]
    live = start_server(own_llm, config)
    try:

        def preflight(method: str, headers: str) -> httpx.Response:
            return httpx.options(
                live.url + "/v1/completions",
                headers={
                    "Origin": "http://example.com",
                    "Access-Control-Request-Method": method,
                    "Access-Control-Request-Headers": headers,
                },
            )

        assert preflight("POST", "content-type").status_code == 200
        assert preflight("POST", "x-stainless-os").status_code == 400
        assert preflight("PUT", "content-type").status_code == 400
    finally:
        live.stop()
    with pytest.raises(ValueError, match="allowed_methods"):
        ServerConfig(allowed_methods="FETCH")


def test_cors_headers_and_methods_reach_vllm():
    from model_optimizer.optimizer.deploy.vllm_flags import TRANSLATED

    assert TRANSLATED["allowed_headers"] == "--allowed-headers"
    assert TRANSLATED["allowed_methods"] == "--allowed-methods"
