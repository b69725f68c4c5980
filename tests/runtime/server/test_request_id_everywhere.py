"""--enable-request-id-headers: every answer carries X-Request-Id, the early ones included: the guard's
refusals (401, 413, 415), a body that is not JSON (400), routes and methods that do not exist (404, 405),
a drain (503) and the HTTP layer's own answers written to the socket before any app runs (431, 400 for
invalid HTTP, 408, 429). On the real server, with httpx and raw sockets."""

from __future__ import annotations

import gzip

import httpx
import pytest

from model_optimizer.runtime.server.config import ServerConfig
from tests.runtime.server.conftest import CAPS
from tests.runtime.server.live import start_server
from tests.runtime.server.test_http_layer import connect, is_closed, read_response

KEY = "k"
AUTH = {"Authorization": f"Bearer {KEY}"}
PROMPT = {"model": "tiny", "prompt": "Hi", "max_tokens": 1}


@pytest.fixture(scope="module")
def id_server(server_llm):
    config = ServerConfig(
        served_model_name="tiny",
        api_key=KEY,
        enable_request_id_headers=True,
        enable_pause=True,
        max_connections_per_client=2,
        header_timeout=1.0,
        **CAPS,
    )
    live = start_server(server_llm, config)
    yield live
    live.stop()


def early_answers(url: str, headers: dict) -> dict[str, httpx.Response]:
    big = b"x" * (CAPS["max_body_bytes"] + 1)
    with httpx.Client(base_url=url, timeout=60) as c:
        return {
            "401": c.get("/v1/models", headers={k: v for k, v in headers.items() if k != "Authorization"}),
            "413": c.post("/v1/completions", content=big, headers=headers),
            "400": c.post("/v1/completions", content=b"{not json", headers=headers),
            "415": c.post(
                "/v1/completions", content=gzip.compress(b"{}"), headers={**headers, "Content-Encoding": "gzip"}
            ),
            "404": c.get("/v1/nowhere", headers=headers),
            "405": c.get("/v1/completions", headers=headers),
            "431": c.get("/v1/models", headers={**headers, "X-Pad": "a" * CAPS["max_header_bytes"]}),
        }


def test_early_answers_echo_the_clients_id(id_server):
    answers = early_answers(id_server.url, {**AUTH, "X-Request-Id": "early-1"})
    assert {name: (r.status_code, r.headers.get("x-request-id")) for name, r in answers.items()} == {
        name: (int(name), "early-1") for name in answers
    }


def test_early_answers_make_an_id_when_the_client_sent_none(id_server):
    answers = early_answers(id_server.url, AUTH)
    made = [r.headers.get("x-request-id") for r in answers.values()]
    assert all(m is not None and len(m) == 32 for m in made) and len(set(made)) == len(made)


def test_a_drain_and_a_pause_refused_during_it_carry_the_id(id_server):
    id_server.state.draining = True
    try:
        refused = httpx.post(id_server.url + "/v1/completions", json=PROMPT, headers={**AUTH, "X-Request-Id": "d-1"})
        pause = httpx.post(id_server.url + "/pause", headers={**AUTH, "X-Request-Id": "d-2"})
    finally:
        id_server.state.draining = False
    assert (refused.status_code, refused.headers["x-request-id"]) == (503, "d-1")
    assert (pause.status_code, pause.headers["x-request-id"]) == (503, "d-2")


def test_invalid_http_is_answered_with_the_id(id_server):
    sock = connect(id_server.url)
    sock.sendall(
        b"GET /v1/models HTTP/1.1\r\nHost: x\r\nX-Request-Id: bad-1\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\n"
    )
    status, headers, _ = read_response(sock)
    assert (status, headers["x-request-id"]) == (400, "bad-1")


def test_a_head_that_never_ends_is_answered_408_with_an_id(id_server):
    sock = connect(id_server.url)
    sock.sendall(b"GET /v1/models HTTP/1.1\r\nX-Request-Id: slow-1\r\n")  # the head's blank line never comes
    status, headers, _ = read_response(sock)
    assert (status, headers["x-request-id"]) == (408, "slow-1")


def test_a_connection_over_the_per_client_cap_is_answered_429_with_a_new_id(id_server):
    held = [connect(id_server.url) for _ in range(2)]
    try:
        extra = connect(id_server.url)
        status, headers, _ = read_response(extra)
        assert status == 429 and len(headers["x-request-id"]) == 32 and is_closed(extra)
    finally:
        for sock in held:
            sock.close()


def test_without_the_flag_no_early_answer_carries_one(server):
    answers = early_answers(server.url, {"X-Request-Id": "off-1"})
    assert all("x-request-id" not in r.headers for r in answers.values())


def test_an_id_cut_off_at_the_end_of_the_bytes_is_not_echoed():
    from model_optimizer.runtime.server.request_ids import id_in_head

    assert id_in_head(b"GET / HTTP/1.1\r\nX-Request-Id: whole\r\nX-Pad: aa") == b"whole"
    assert id_in_head(b"GET / HTTP/1.1\r\nHost: x\r\nX-Request-Id: cut-of") is None
    assert id_in_head(b"x-request-id:  spaced \r\n") == b"spaced"
