"""--api-key guards every route but /health, /ready and /metrics; no spelling of a path gets around it."""

from __future__ import annotations

import socket

import httpx
import openai
import pytest

from tests.runtime.server.conftest import API_KEY

GOOD = {"Authorization": f"Bearer {API_KEY}"}


def raw_get(url: str, target: str, headers: dict | None = None) -> int:
    """Send a request line exactly as written (httpx would normalise the path), return the status."""
    host, port = url.removeprefix("http://").split(":")
    lines = [f"GET {target} HTTP/1.1", f"Host: {host}", "Connection: close"]
    lines += [f"{k}: {v}" for k, v in (headers or {}).items()]
    with socket.create_connection((host, int(port)), timeout=10) as sock:
        sock.sendall(("\r\n".join(lines) + "\r\n\r\n").encode())
        reply = sock.recv(4096)
    return int(reply.split(b" ", 2)[1])


def test_public_routes_need_no_key(strict_server):
    assert httpx.get(strict_server.url + "/health").status_code == 200
    assert httpx.get(strict_server.url + "/metrics").status_code == 200
    assert httpx.get(strict_server.url + "/ready").json() == {"status": "ready"}  # orchestrator probes send no key


@pytest.mark.parametrize(
    "path", ["/v1/models", "/v1/models/x", "/version", "/openapi.json", "/docs", "/nope", "/READY"]
)
def test_guarded_routes(strict_server, path):
    r = httpx.get(strict_server.url + path)
    assert r.status_code == 401 and r.json()["error"]["type"] == "authentication_error"
    assert r.headers["www-authenticate"] == "Bearer"
    assert httpx.get(strict_server.url + path, headers=GOOD).status_code in (200, 404)


@pytest.mark.parametrize(
    "header", ["Bearer wrong", f"Bearer {API_KEY}x", f"Basic {API_KEY}", API_KEY, "Bearer", f"Bearer {API_KEY[:-1]}"]
)
def test_wrong_keys(strict_server, header):
    assert httpx.get(strict_server.url + "/v1/models", headers={"Authorization": header}).status_code == 401


@pytest.mark.parametrize(
    "target",
    [
        "//v1/models",
        "/V1/models",
        "/v1/models/",
        "/%2Fv1/models",
        "/v1%2Fmodels",
        "/v1/./models",
        "/health/../v1/models",
        "/v1/models?x=/health",
        "/health/",
        "//health",
        "/HEALTH",
        "/v1/models%00",
        "/%761/models",
        "/metrics/../v1/models",
    ],
)
def test_path_variants_cannot_bypass(strict_server, target):
    assert raw_get(strict_server.url, target) == 401
    assert raw_get(strict_server.url, target, GOOD) != 401


def test_post_without_key_is_refused_before_reading_body(strict_server):
    r = httpx.post(
        strict_server.url + "/v1/completions", content=b"x" * 200_000, headers={"content-type": "application/json"}
    )
    assert r.status_code == 401


def test_openai_client_with_key(strict_server):
    good = openai.OpenAI(base_url=strict_server.url + "/v1", api_key=API_KEY, max_retries=0)
    assert good.completions.create(model=good.models.list().data[0].id, prompt="hi", max_tokens=2).choices
    bad = openai.OpenAI(base_url=strict_server.url + "/v1", api_key="nope", max_retries=0)
    with pytest.raises(openai.AuthenticationError):
        bad.models.list()
