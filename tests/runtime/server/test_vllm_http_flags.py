"""vLLM's server flags for HTTP: TLS, a proxy's root path, X-Request-Id headers, the response role, and
tokens named by id in logprobs. Each runs a real server (uvicorn on 127.0.0.1) and talks to it with httpx
or the openai client.

data/tls_cert.pem and data/tls_key.pem are a self-signed certificate for 127.0.0.1 made for these tests
alone (`openssl req -x509 -newkey rsa:2048 -nodes -days 36500 -subj /CN=127.0.0.1
-addext subjectAltName=IP:127.0.0.1,DNS:localhost`): the key protects nothing.
"""

from __future__ import annotations

import json
import signal
import ssl
from pathlib import Path

import httpx
import openai
import pytest

from model_optimizer.runtime.server.config import ServerConfig
from tests.runtime.server.conftest import CAPS
from tests.runtime.server.live import sse_payloads, start_server
from tests.runtime.server.test_process import launch

DATA = Path(__file__).parent / "data"
CERT, KEY = str(DATA / "tls_cert.pem"), str(DATA / "tls_key.pem")
USER = [{"role": "user", "content": "Hello"}]


@pytest.fixture(scope="module")
def tls_server(server_llm):
    live = start_server(server_llm, ServerConfig(served_model_name="tiny", ssl_keyfile=KEY, ssl_certfile=CERT, **CAPS))
    yield live
    live.stop()


def test_https_with_the_given_certificate(tls_server):
    assert tls_server.url.startswith("https://127.0.0.1:")
    with httpx.Client(base_url=tls_server.url, verify=ssl.create_default_context(cafile=CERT), timeout=60) as c:
        assert c.get("/v1/models").json()["data"][0]["id"] == "tiny"
        client = openai.OpenAI(base_url=tls_server.url + "/v1", api_key="x", http_client=c)
        out = client.completions.create(model="tiny", prompt="Hello", max_tokens=3, temperature=0)
        assert out.usage.completion_tokens == 3
    with pytest.raises(httpx.ConnectError):  # a client that does not trust the certificate is refused
        httpx.get(tls_server.url + "/health")
    plain = tls_server.url.replace("https://", "http://")
    with pytest.raises(httpx.HTTPError):  # and the port speaks no plain HTTP
        httpx.get(plain + "/health", timeout=10)
    assert httpx.get(tls_server.url + "/health", verify=False).status_code == 200  # the server is still up


@pytest.mark.parametrize(
    "settings, message",
    [
        (dict(ssl_keyfile=KEY), "both ssl_keyfile and ssl_certfile"),
        (dict(ssl_keyfile=KEY, ssl_certfile=str(DATA / "missing.pem")), "ssl_certfile: no such file"),
        (dict(ssl_keyfile=KEY, ssl_certfile=CERT, ssl_cert_reqs=2), "needs HTTPS and ssl_ca_certs"),
        (dict(ssl_keyfile=KEY, ssl_certfile=CERT, ssl_ca_certs=CERT, ssl_cert_reqs=3), "ssl_cert_reqs must be"),
        (dict(root_path="llm"), "root_path must be a path"),
        (dict(ssl_keyfile="~/no-such-key.pem", ssl_certfile=CERT), "ssl_keyfile: no such file: ~/no-such-key.pem"),
        (dict(response_role=" "), "response_role must be a role name"),
    ],
)
def test_bad_http_settings_are_refused_before_anything_starts(settings, message):
    with pytest.raises(ValueError, match=message):
        ServerConfig(**settings)


def test_client_certificates_are_required_when_asked(server_llm):
    """ssl_cert_reqs 2 with ssl_ca_certs: a client without a certificate the CA signed is refused."""
    config = ServerConfig(
        served_model_name="tiny", ssl_keyfile=KEY, ssl_certfile=CERT, ssl_ca_certs=CERT, ssl_cert_reqs=2
    )
    live = start_server(server_llm, config)
    try:
        trusting = ssl.create_default_context(cafile=CERT)
        with pytest.raises(httpx.HTTPError):
            httpx.get(live.url + "/health", verify=trusting, timeout=10)
        trusting.load_cert_chain(CERT, KEY)  # the self-signed certificate is its own CA
        assert httpx.get(live.url + "/health", verify=trusting, timeout=10).status_code == 200
    finally:
        live.stop()


def test_root_path_is_in_the_docs_and_requests_route_with_or_without_it(server_llm):
    """The API served under /llm by a proxy that strips the prefix or one that does not: both route, the key
    check and the metrics read the path without it, and the docs name it (as vLLM's app.root_path)."""
    live = start_server(server_llm, ServerConfig(served_model_name="tiny", root_path="/llm", api_key="k", **CAPS))
    try:
        spec = httpx.get(live.url + "/openapi.json", headers=AUTH).json()
        assert spec["servers"] == [{"url": "/llm"}]
        assert "/llm/openapi.json" in httpx.get(live.url + "/docs", headers=AUTH).text
        for prefix in ("", "/llm"):
            assert httpx.get(live.url + prefix + "/v1/models", headers=AUTH).json()["data"][0]["id"] == "tiny"
            assert httpx.get(live.url + prefix + "/v1/models").status_code == 401
            assert httpx.get(live.url + prefix + "/health").status_code == 200  # still public for the probes
        assert httpx.get(live.url + "/llm").status_code == 401  # the prefix alone is no public path
        metrics = httpx.get(live.url + "/metrics").text
        assert 'handler="/v1/models"' in metrics and 'handler="/llm' not in metrics
    finally:
        live.stop()


@pytest.fixture(scope="module")
def flags_server(server_llm):
    """Request-id headers, a response role of its own and tokens named by id unless a request says not,
    behind an API key (so a refusal can be checked for the header too)."""
    config = ServerConfig(
        served_model_name="tiny",
        api_key="k",
        enable_request_id_headers=True,
        response_role="bot",
        return_tokens_as_token_ids=True,
        **CAPS,
    )
    live = start_server(server_llm, config)
    yield live
    live.stop()


AUTH = {"Authorization": "Bearer k"}


def test_request_id_headers(flags_server, server):
    url = flags_server.url
    sent = httpx.get(url + "/v1/models", headers={**AUTH, "X-Request-Id": "trace-42"})
    assert sent.status_code == 200 and sent.headers["x-request-id"] == "trace-42"
    made = [httpx.get(url + "/v1/models", headers=AUTH).headers["x-request-id"] for _ in range(2)]
    assert all(len(m) == 32 and int(m, 16) >= 0 for m in made) and made[0] != made[1]  # a new id each time
    refused = httpx.get(url + "/v1/models", headers={"X-Request-Id": "no-key"})
    assert refused.status_code == 401 and refused.headers["x-request-id"] == "no-key"
    body = {"model": "tiny", "prompt": "Hi", "max_tokens": 2, "stream": True}
    streamed = httpx.post(url + "/v1/completions", json=body, headers={**AUTH, "X-Request-Id": "s-1"}, timeout=60)
    assert streamed.headers["x-request-id"] == "s-1" and sse_payloads(streamed)[-1] == "[DONE]"
    too_long = httpx.get(url + "/v1/models", headers={**AUTH, "X-Request-Id": "x" * 300})
    assert len(too_long.headers["x-request-id"]) == 32  # replaced, not echoed
    spaced = httpx.get(url + "/v1/models", headers={**AUTH, "X-Request-Id": "trace 42"})
    assert spaced.headers["x-request-id"] == "trace 42"  # printable ASCII, spaces included
    assert "x-request-id" not in httpx.get(server.url + "/v1/models").headers  # off by default


def test_a_server_error_carries_the_request_id_too(server_llm):
    """A route that fails unexpectedly is answered by Starlette's outermost error handler: the id is on it."""
    live = start_server(server_llm, ServerConfig(served_model_name="tiny", enable_request_id_headers=True, **CAPS))
    try:

        async def boom() -> None:
            raise RuntimeError("a bug")

        live.server.config.app.add_api_route("/boom", boom)
        r = httpx.get(live.url + "/boom", headers={"X-Request-Id": "e-1"})
        assert r.status_code == 500 and r.headers["x-request-id"] == "e-1"
    finally:
        live.stop()


def test_the_response_role_follows_vllms_rule(flags_server):
    client = openai.OpenAI(base_url=flags_server.url + "/v1", api_key="k")
    answer = client.chat.completions.create(model="tiny", messages=USER, max_tokens=2)
    assert answer.choices[0].message.role == "bot"
    stream = client.chat.completions.create(model="tiny", messages=USER, max_tokens=2, stream=True)
    assert next(iter(stream)).choices[0].delta.role == "bot"
    # without a generation prompt the answer continues the last message, and takes its role
    continued = [*USER, {"role": "assistant", "content": "Hi"}]
    body = {"model": "tiny", "messages": continued, "max_tokens": 2, "add_generation_prompt": False,
            "continue_final_message": True}  # fmt: skip
    r = httpx.post(flags_server.url + "/v1/chat/completions", json=body, headers=AUTH, timeout=60)
    assert r.json()["choices"][0]["message"]["role"] == "assistant"


def _logprob_request(url: str, path: str, body: dict) -> dict:
    r = httpx.post(
        url + path, json={"model": "tiny", "max_tokens": 4, "temperature": 0, **body}, headers=AUTH, timeout=60
    )
    assert r.status_code == 200, r.text
    return r.json()["choices"][0]


def test_tokens_named_by_id_in_logprobs(flags_server):
    url = flags_server.url
    choice = _logprob_request(url, "/v1/completions", {"prompt": "Hello", "logprobs": 2, "return_token_ids": True})
    names = [f"token_id:{t}" for t in choice["token_ids"]]
    assert choice["logprobs"]["tokens"] == names
    for name, top in zip(names, choice["logprobs"]["top_logprobs"]):
        assert name in top and all(key.startswith("token_id:") for key in top)
    chat = _logprob_request(url, "/v1/chat/completions", {"messages": USER, "logprobs": True, "top_logprobs": 2,
                                                          "return_token_ids": True})  # fmt: skip
    content = chat["logprobs"]["content"]
    assert [c["token"] for c in content] == [f"token_id:{t}" for t in chat["token_ids"]]
    assert all(c["bytes"] == list(c["token"].encode()) for c in content)
    assert all(t["token"].startswith("token_id:") for c in content for t in c["top_logprobs"])
    # a request's own false names them by text again; the text itself never changes
    texts = _logprob_request(
        url, "/v1/completions", {"prompt": "Hello", "logprobs": 1, "return_tokens_as_token_ids": False}
    )
    assert "".join(texts["logprobs"]["tokens"]) == texts["text"] == choice["text"]
    streamed = httpx.post(
        url + "/v1/completions",
        json={"model": "tiny", "prompt": "Hello", "max_tokens": 4, "temperature": 0, "logprobs": 1, "stream": True},
        headers=AUTH,
        timeout=60,
    )
    chunks = [json.loads(p) for p in sse_payloads(streamed)[:-1]]
    tokens = [t for c in chunks for ch in c["choices"] if ch.get("logprobs") for t in ch["logprobs"]["tokens"]]
    assert tokens == names


def test_mopt_serve_takes_the_flags_as_vllm_spells_them(tiny_model):
    """The flags through `mopt serve` as a process (its own uvicorn settings, not the test server's)."""
    proc, url = launch(
        tiny_model("qwen3"),
        "--ssl-keyfile", KEY, "--ssl-certfile", CERT, "--root-path", "/llm", "--enable-request-id-headers",
        "--response-role", "bot", "--return-tokens-as-token-ids", "--served-model-name", "tiny",
    )  # fmt: skip
    try:
        assert url.startswith("https://")
        with httpx.Client(base_url=url, verify=ssl.create_default_context(cafile=CERT), timeout=60) as c:
            models = c.get("/v1/models", headers={"X-Request-Id": "p-1"})
            assert models.headers["x-request-id"] == "p-1"
            assert c.get("/openapi.json").json()["servers"] == [{"url": "/llm"}]
            body = {"model": "tiny", "messages": USER, "max_tokens": 2, "logprobs": True, "return_token_ids": True}
            choice = c.post("/v1/chat/completions", json=body).json()["choices"][0]
            assert choice["message"]["role"] == "bot"
            assert [t["token"] for t in choice["logprobs"]["content"]] == [f"token_id:{t}" for t in choice["token_ids"]]
    finally:
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(120) == 0


def test_tls_paths_are_read_as_a_shell_would(monkeypatch):
    """A quoted "~/key.pem" (the shell expands none) is the home folder's: the path uvicorn gets."""
    monkeypatch.setenv("HOME", str(DATA))
    config = ServerConfig(ssl_keyfile="~/tls_key.pem", ssl_certfile="~/tls_cert.pem")
    assert (config.ssl_keyfile, config.ssl_certfile) == (KEY, CERT)


def test_token_ids_keep_offsets_and_prompt_texts(flags_server):
    """Named by id, tokens still have their offsets in the text (echoed prompt then completion), and
    prompt_logprobs keep each token's text as decoded_token (as vLLM's)."""
    body = {"prompt": "Hello world", "echo": True, "logprobs": 1, "prompt_logprobs": 1}
    named = _logprob_request(flags_server.url, "/v1/completions", body)
    plain = _logprob_request(flags_server.url, "/v1/completions", {**body, "return_tokens_as_token_ids": False})
    assert named["logprobs"]["text_offset"] == plain["logprobs"]["text_offset"]
    offsets = named["logprobs"]["text_offset"]
    assert offsets == sorted(offsets) and offsets[-1] < len(named["text"])
    assert all(t.startswith("token_id:") for t in named["logprobs"]["tokens"])
    assert named["prompt_logprobs"] == plain["prompt_logprobs"]
    decoded = [e["decoded_token"] for entry in named["prompt_logprobs"] if entry for e in entry.values()]
    assert decoded and not any(d.startswith("token_id:") for d in decoded)


def test_token_ids_name_tokens_of_a_model_without_tokenizer(tiny_model):
    from model_optimizer import LLM

    llm = LLM(str(tiny_model("qwen3")), skip_tokenizer_init=True, max_model_len=128, num_kv_blocks=64)
    live = start_server(llm, ServerConfig(return_tokens_as_token_ids=True, **CAPS))
    try:
        body = {"prompt": [5, 6, 7], "max_tokens": 3, "logprobs": 1}
        choice = httpx.post(live.url + "/v1/completions", json=body, timeout=60).json()["choices"][0]
        assert choice["logprobs"]["tokens"] == [f"token_id:{t}" for t in choice["token_ids"]]
        streamed = httpx.post(live.url + "/v1/completions", json={**body, "stream": True}, timeout=60)
        chunks = [json.loads(p) for p in sse_payloads(streamed)[:-1]]
        choices = [ch for c in chunks for ch in c["choices"] if ch.get("logprobs")]
        tokens = [t for ch in choices for t in ch["logprobs"]["tokens"]]
        assert tokens and tokens == [f"token_id:{t}" for ch in choices for t in ch["token_ids"]]
    finally:
        live.stop()


def test_generation_config_max_new_tokens_caps_the_requests_max_tokens():
    """vLLM's get_max_tokens takes the smallest of the room left, the request's and the default's."""
    from types import SimpleNamespace

    from model_optimizer.runtime.server.sampling import resolve_max_tokens

    state = SimpleNamespace(
        model=SimpleNamespace(max_model_len=128),
        config=ServerConfig(),
        sampling_defaults={"max_tokens": 5},
    )
    assert resolve_max_tokens(state, 7, 3) == 5  # the model's max_new_tokens caps the request's
    assert resolve_max_tokens(state, 4, 3) == 4
    assert resolve_max_tokens(state, None, 3) == 5
    state.sampling_defaults = {}
    assert resolve_max_tokens(state, 7, 3) == 7
