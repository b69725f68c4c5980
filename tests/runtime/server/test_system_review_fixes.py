"""Fixes from a system review: a drain waits for requests accepted but not yet at the engine, /pause is refused
while draining, --root-path /llm/ works as /llm, JSON bodies without a Content-Type or typed application/*+json
are read, a compressed body gets 415, a 405 on /health and /ready names HEAD, /v1/models cards have vLLM's
`parent` and `permission`, vLLM's /ping answers as /health does, and /is_paused says the core's state
whichever --api-server-count frontend answers.

Requests are held with HeldExecutor (the tokenizing threads), so a request is provably accepted and not yet
admitted when the drain starts, on any machine: nothing is timed."""

from __future__ import annotations

import gzip
import json
import logging
import signal
import socket
import threading
from concurrent.futures import ThreadPoolExecutor

import httpx
import pytest

from model_optimizer.runtime.server.app import create_app
from model_optimizer.runtime.server.config import ServerConfig
from model_optimizer.runtime.server.http_server import DrainingServer, uvicorn_config
from tests.runtime.server.conftest import API_KEY, CAPS
from tests.runtime.server.live import HELD_WAIT, HeldExecutor, start_server, wait_for

WAIT = 60.0
LAUNCHER_LOG = "model_optimizer.runtime.server.launcher"
BODY = {"model": "tiny", "prompt": "hold me at the tokenizer", "max_tokens": 4, "ignore_eos": True}


def draining_server(llm, config: ServerConfig) -> tuple[str, DrainingServer, threading.Thread, HeldExecutor]:
    """The app under `mopt serve`'s own uvicorn server (DrainingServer) in a thread, its tokenizing threads held
    (uvicorn's own graceful wait made long, so that only the drain decides when requests are cut)."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.bind(("127.0.0.1", 0))
    app = create_app(config, None, llm=llm)
    state = app.state.server
    held = HeldExecutor()
    state.executor.shutdown(wait=False)
    state.executor = held
    uv = uvicorn_config(app, config)
    uv.timeout_graceful_shutdown = 300  # a bound on a hang: the drain, not uvicorn, ends requests here
    server = DrainingServer(uv, state)
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    wait_for(lambda: server.started, "the server started", WAIT)
    return f"http://127.0.0.1:{sock.getsockname()[1]}", server, thread, held


def test_a_drain_waits_for_a_request_accepted_but_not_yet_admitted(own_llm, caplog):
    url, server, thread, held = draining_server(own_llm, ServerConfig(served_model_name="tiny", shutdown_timeout=300))
    state = server.state
    try:
        with ThreadPoolExecutor(1) as pool:
            pending = pool.submit(httpx.post, url + "/v1/completions", json=BODY, timeout=WAIT)
            assert held.entered.wait(HELD_WAIT)  # accepted, tokenizing: not admitted yet
            assert state.num_admitted == 0 and state.num_accepted == 1
            with caplog.at_level(logging.INFO, logger=LAUNCHER_LOG):
                server.handle_exit(signal.SIGTERM, None)
            assert "draining 1 request(s)" in caplog.text
            refused = httpx.post(url + "/v1/completions", json=BODY, timeout=WAIT)
            assert refused.status_code == 503 and refused.json()["error"]["message"] == "the server is shutting down"
            assert thread.is_alive() and not server.should_exit  # the drain waits for the held request
            held.proceed.set()
            response = pending.result(WAIT)
        assert response.status_code == 200, response.text
        assert response.json()["choices"][0]["finish_reason"] == "length"
        thread.join(WAIT)
        assert not thread.is_alive()  # the drain ended with the request
        assert state.num_accepted == 0 and state.num_admitted == 0
    finally:
        held.proceed.set()
        server.should_exit = True
        thread.join(WAIT)


def test_a_drain_out_of_time_refuses_a_request_still_on_its_way_with_an_error_body(own_llm, caplog):
    url, server, thread, held = draining_server(own_llm, ServerConfig(served_model_name="tiny", shutdown_timeout=0))
    try:
        with ThreadPoolExecutor(1) as pool, caplog.at_level(logging.INFO, logger=LAUNCHER_LOG):
            pending = pool.submit(httpx.post, url + "/v1/completions", json=BODY, timeout=WAIT)
            assert held.entered.wait(HELD_WAIT)
            server.handle_exit(signal.SIGTERM, None)
            wait_for(lambda: "drain timed out: aborting 1 request(s)" in caplog.text, "the drain gave up", WAIT)
            held.proceed.set()
            response = pending.result(WAIT)
        assert response.status_code == 503 and response.headers["retry-after"] == "1"
        assert response.json()["error"]["message"] == "the server shut down before the request started"
        thread.join(WAIT)
        assert not thread.is_alive()
    finally:
        held.proceed.set()
        server.should_exit = True
        thread.join(WAIT)


def test_a_streamed_request_is_counted_until_its_last_chunk(own_llm):
    """Counted from acceptance to the end of the response: a finished stream leaves nothing in flight, and
    requests that never pass check_accepting (probes, 404s) are never counted."""
    live = start_server(own_llm, ServerConfig(served_model_name="tiny"))
    try:
        with httpx.Client(base_url=live.url, timeout=WAIT) as client:
            with client.stream("POST", "/v1/completions", json={**BODY, "stream": True}) as r:
                assert r.status_code == 200
                assert live.state.num_accepted == 1  # the response has started, not ended
                text = r.read().decode()
            assert text.rstrip().endswith("data: [DONE]")
            assert client.get("/health").status_code == 200
            assert client.post("/v1/completions", json={**BODY, "model": "other"}).status_code == 404
            wait_for(lambda: live.state.num_accepted == 0, "the stream's response ended", WAIT)
    finally:
        live.stop()


@pytest.fixture(scope="module")
def pause_server(own_llm):
    live = start_server(own_llm, ServerConfig(served_model_name="tiny", enable_pause=True))
    yield live
    live.stop()


def test_pause_is_refused_while_draining(pause_server):
    state = pause_server.state
    state.draining = True
    try:
        r = httpx.post(pause_server.url + "/pause", timeout=WAIT)
        assert r.status_code == 503 and r.headers["retry-after"] == "1", r.text
        assert r.json()["error"]["message"] == "the server is shutting down"
        assert httpx.get(pause_server.url + "/is_paused", timeout=WAIT).json() == {"is_paused": False}
        assert httpx.post(pause_server.url + "/resume", timeout=WAIT).status_code == 200  # harmless: allowed
    finally:
        state.draining = False
    assert httpx.post(pause_server.url + "/pause", timeout=WAIT).json() == {"is_paused": True}
    assert httpx.post(pause_server.url + "/resume", timeout=WAIT).json() == {"is_paused": False}


@pytest.mark.parametrize("given, kept", [("/llm/", "/llm"), ("/llm//", "/llm"), ("/a/b/", "/a/b"), ("/llm", "/llm")])
def test_root_path_with_a_trailing_slash_is_the_path_without_it(given, kept):
    assert ServerConfig(root_path=given).root_path == kept


@pytest.mark.parametrize("given", ["/", "//", "llm/", ""])
def test_root_path_with_nothing_left_is_refused(given):
    with pytest.raises(ValueError, match="root_path must be a path"):
        ServerConfig(root_path=given)


def test_root_path_with_a_trailing_slash_routes_prefixed_requests(server_llm):
    live = start_server(server_llm, ServerConfig(served_model_name="tiny", root_path="/llm/", **CAPS))
    try:
        for prefix in ("", "/llm"):
            assert httpx.get(live.url + prefix + "/v1/models", timeout=WAIT).json()["data"][0]["id"] == "tiny"
            assert httpx.get(live.url + prefix + "/health", timeout=WAIT).status_code == 200
        assert httpx.get(live.url + "/openapi.json", timeout=WAIT).json()["servers"] == [{"url": "/llm"}]
    finally:
        live.stop()


COMPLETION = json.dumps({"model": "tiny", "prompt": "Hello", "max_tokens": 2}).encode()


@pytest.mark.parametrize(
    "content_type", [None, "application/vnd.api+json", "application/merge-patch+json; charset=utf-8"]
)
def test_a_json_body_without_a_content_type_or_typed_plus_json_is_read(client, content_type):
    headers = {} if content_type is None else {"content-type": content_type}
    r = client.post("/v1/completions", content=COMPLETION, headers=headers)
    assert r.status_code == 200, r.text
    assert r.json()["usage"]["completion_tokens"] == 2
    r = client.post("/tokenize", content=json.dumps({"model": "tiny", "prompt": "Hello"}).encode(), headers=headers)
    assert r.status_code == 200 and r.json()["count"] >= 1, r.text


@pytest.mark.parametrize("content_type", ["text/plain", "application/x-www-form-urlencoded", "text/json+json"])
def test_a_body_of_another_type_is_still_415(client, content_type):
    r = client.post("/v1/completions", content=COMPLETION, headers={"content-type": content_type})
    assert r.status_code == 415, r.text


@pytest.mark.parametrize("encoding", ["gzip", "deflate", "br"])
def test_a_compressed_body_gets_415_naming_the_content_encoding(client, encoding):
    body = gzip.compress(COMPLETION)
    r = client.post(
        "/v1/completions", content=body, headers={"content-type": "application/json", "content-encoding": encoding}
    )
    assert r.status_code == 415, r.text
    message = r.json()["error"]["message"]
    assert "Content-Encoding" in message and encoding in message
    identity = client.post(
        "/v1/completions",
        content=COMPLETION,
        headers={"content-type": "application/json", "content-encoding": "identity"},
    )
    assert identity.status_code == 200, identity.text


@pytest.mark.parametrize("path", ["/health", "/ready"])
def test_a_405_on_a_probe_names_head_in_allow(client, path):
    for method in ("POST", "PUT", "DELETE"):
        r = client.request(method, path)
        assert r.status_code == 405, r.text
        assert {m.strip() for m in r.headers["allow"].split(",")} == {"GET", "HEAD"}
        assert r.json()["error"]["type"]  # our error shape
    assert client.head(path).status_code == 200


def test_model_cards_have_vllms_parent_and_permission(client):
    for card in (client.get("/v1/models").json()["data"][0], client.get("/v1/models/tiny").json()):
        assert card["parent"] is None
        [permission] = card["permission"]
        assert permission["id"].startswith("modelperm-") and permission["object"] == "model_permission"
        assert isinstance(permission["created"], int)
        assert {k: v for k, v in permission.items() if k not in ("id", "created", "object")} == {
            "allow_create_engine": False,
            "allow_sampling": True,
            "allow_logprobs": True,
            "allow_search_indices": False,
            "allow_view": True,
            "allow_fine_tuning": False,
            "organization": "*",
            "group": None,
            "is_blocking": False,
        }


def test_ping_answers_as_health(client):
    for method in ("GET", "POST"):
        r = client.request(method, "/ping")
        assert r.status_code == 200 and r.content == b"", (method, r.text)
    r = client.put("/ping")
    assert r.status_code == 405 and {m.strip() for m in r.headers["allow"].split(",")} == {"GET", "POST"}


def test_ping_is_public_under_an_api_key_as_health_is(strict_server):
    for method in ("GET", "POST"):
        assert httpx.request(method, strict_server.url + "/ping", timeout=WAIT).status_code == 200
    assert httpx.get(strict_server.url + "/health", timeout=WAIT).status_code == 200
    assert httpx.get(strict_server.url + "/v1/models", timeout=WAIT).status_code == 401  # the key still counts
    auth = {"Authorization": f"Bearer {API_KEY}"}
    assert httpx.get(strict_server.url + "/v1/models", headers=auth, timeout=WAIT).status_code == 200


def test_ping_is_503_once_the_engine_has_failed(pause_server):
    state = pause_server.state
    state.load_error = RuntimeError("injected for the test")
    try:
        for method in ("GET", "POST"):
            r = httpx.request(method, pause_server.url + "/ping", timeout=WAIT)
            assert r.status_code == 503 and r.json()["error"]["message"] == "the engine has failed"
        assert httpx.get(pause_server.url + "/health", timeout=WAIT).status_code == 503
    finally:
        state.load_error = None
    assert httpx.get(pause_server.url + "/ping", timeout=WAIT).status_code == 200


@pytest.mark.slow
def test_is_paused_is_the_cores_state_whichever_frontend_answers(tiny_model):
    from tests.runtime.server.test_process import launch

    proc, url = launch(tiny_model("qwen3"), "--api-server-count", "2", "--enable-pause")

    def answers() -> set[bool]:  # a new connection each: the kernel spreads them over both frontends
        return {
            httpx.get(url + "/is_paused", headers={"Connection": "close"}, timeout=WAIT).json()["is_paused"]
            for _ in range(32)
        }

    try:
        assert answers() == {False}
        assert httpx.post(url + "/pause", timeout=WAIT).json() == {"is_paused": True}
        wait_for(lambda: answers() == {True}, "every frontend says paused", WAIT)
        assert httpx.post(url + "/resume", timeout=WAIT).json() == {"is_paused": False}
        wait_for(lambda: answers() == {False}, "every frontend says resumed", WAIT)
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(WAIT) == 0
    finally:
        proc.kill()
