"""Bad input gets OpenAI-shaped 4xx errors (never 422, never 500), bounded in size."""

from __future__ import annotations

import socket
import threading

import httpx
import pytest

from tests.runtime.server.conftest import API_KEY, CAPS
from tests.runtime.server.live import wait_for


@pytest.fixture(scope="module")
def client(server):
    with httpx.Client(base_url=server.url, timeout=60) as c:
        yield c


def assert_error(response: httpx.Response, status: int, *fragments: str) -> dict:
    assert response.status_code == status, response.text
    error = response.json()["error"]
    assert set(error) == {"message", "type", "param", "code"}
    assert error["code"] == status
    for fragment in fragments:
        assert fragment in error["message"], error["message"]
    return error


def test_validation_error_is_400_in_openai_shape(client):
    error = assert_error(client.post("/v1/completions", json={"prompt": "x", "temperature": "hot"}), 400, "temperature")
    assert error["type"] == "invalid_request_error" and error["param"] == "temperature"
    assert_error(client.post("/v1/completions", json={"max_tokens": 3}), 400, "prompt")
    assert_error(client.post("/v1/chat/completions", json={"messages": []}), 400, "messages")
    assert_error(client.post("/v1/completions", json={"prompt": "x", "top_p": 0}), 400, "top_p")
    error = assert_error(
        client.post("/v1/completions", json={"prompt": "x", "min_tokens": 9, "max_tokens": 2}), 400, "min_tokens"
    )
    assert error["param"] == "min_tokens"
    echo = {"prompt": "x", "echo": True, "max_tokens": 0, "min_tokens": 1}  # the prompt alone: no output token
    assert assert_error(client.post("/v1/completions", json=echo), 400, "max_tokens (0)")["param"] == "min_tokens"
    chat = {"messages": [{"role": "user", "content": "x"}], "min_tokens": 9, "max_completion_tokens": 2}
    error = assert_error(client.post("/v1/chat/completions", json=chat), 400, "max_completion_tokens (2)")
    assert error["param"] == "min_tokens"  # the field the client named, not max_tokens
    chat = {"messages": [{"role": "user", "content": "x"}], "min_tokens": 500}  # more than max_model_len leaves
    assert_error(client.post("/v1/chat/completions", json=chat), 400, "output tokens allowed here")
    assert_error(client.post("/v1/completions", json={"prompt": [5000]}), 400, "vocabulary")
    assert_error(client.post("/v1/completions", json={"prompt": ""}), 400, "empty")
    assert_error(client.post("/v1/completions", json=[1, 2]), 400)


def test_unknown_model_is_404(client):
    error = assert_error(client.post("/v1/completions", json={"model": "gpt-5", "prompt": "x"}), 404, "gpt-5")
    assert error["param"] == "model"
    assert_error(
        client.post("/v1/chat/completions", json={"model": "m" * 5000, "messages": [{"role": "user", "content": "x"}]}),
        400,
    )


def test_context_overflow_names_both_numbers(client, server_llm):
    prompt = "word " * 50
    num_prompt = len(server_llm.tokenizer.encode(prompt))
    assert_error(
        client.post("/v1/completions", json={"prompt": prompt, "max_tokens": 60}), 400, str(num_prompt), "60", "128"
    )
    assert_error(client.post("/v1/completions", json={"prompt": [7] * 128}), 400, "128")


@pytest.mark.parametrize(
    "body, fragment",
    [
        ({"n": 5}, "n is 5"),
        ({"logprobs": 21}, "logprobs"),
        ({"stop": ["a", "b", "c", "d", "e"]}, "stop strings"),
        ({"stop": ["x" * 33]}, "32 characters"),
        ({"prompt": ["p"] * 9}, "at most 8"),
        ({"max_tokens": 65}, "at most 64"),
        ({"logit_bias": {"x1": 5}}, "non-negative integers"),
        ({"logit_bias": {"-1": 5}}, "non-negative integers"),
        ({"logit_bias": {"1": 101}}, "[-100, 100]"),
        ({"logit_bias": {"99999999": 1}}, "outside the vocabulary"),
        ({"logit_bias": {"0" * 5000: 1}}, "non-negative integers"),  # no int() of 5,000 digits (a 500)
        ({"allowed_token_ids": []}, "allowed_token_ids is empty"),
        ({"bad_words": ["w"] * 5}, "bad words"),
        ({"allowed_token_ids": [99999999]}, "outside the vocabulary"),
        ({"suffix": "tail"}, "suffix"),
        ({"use_beam_search": True, "n": 11}, "at most 4"),
    ],
)
def test_caps(client, body, fragment):
    assert_error(client.post("/v1/completions", json={"prompt": "x", "max_tokens": 2, **body}), 400, fragment)


def raw_exchange(url: str, head: bytes, body_parts: list[bytes]) -> bytes:
    """Send a request as written, stop sending if the server has already answered, return the reply."""
    host, port = url.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port)), timeout=10) as sock:
        sock.sendall(head)
        for part in body_parts:
            try:
                sock.sendall(part)
            except OSError:
                break  # the server answered and closed: the reply is waiting
        reply = b""
        while b"\r\n\r\n" not in reply:
            chunk = sock.recv(65536)
            if not chunk:
                break
            reply += chunk
    return reply


def test_body_too_large_is_413_before_parsing(server):
    limit = CAPS["max_body_bytes"]
    head = (
        f"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
        f"Content-Length: {limit + 10}\r\n\r\n"
    ).encode()
    assert raw_exchange(server.url, head, []).startswith(b"HTTP/1.1 413")  # refused on the header alone
    head = b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n"
    chunk = b"400\r\n" + b"a" * 1024 + b"\r\n"  # no Content-Length: counted while reading
    assert raw_exchange(server.url, head, [chunk] * 100 + [b"0\r\n\r\n"]).startswith(b"HTTP/1.1 413")


def send_then_read(url: str, request: bytes) -> bytes:
    """Send a whole request before reading anything (as simple clients do), then read the reply to its end."""
    host, port = url.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port)), timeout=30) as sock:
        sock.sendall(request)
        reply = b""
        while chunk := sock.recv(65536):
            reply += chunk
    return reply


@pytest.mark.parametrize("framing", ["chunked", "content-length"])
def test_a_client_that_sends_all_of_an_oversized_body_still_reads_its_413(server, framing):
    """The server used to answer 413 and close while the body was still coming: the unread bytes made the
    close a reset, and a client that sends before it reads lost the answer."""
    body = b"a" * (CAPS["max_body_bytes"] * 3)
    head = b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
    if framing == "chunked":
        request = head + b"Transfer-Encoding: chunked\r\n\r\n" + b"%x\r\n" % len(body) + body + b"\r\n0\r\n\r\n"
    else:
        request = head + b"Content-Length: %d\r\n\r\n" % len(body) + body
    for _ in range(3):
        reply = send_then_read(server.url, request)
        assert reply.startswith(b"HTTP/1.1 413") and b"request body too large" in reply


def test_oversized_headers_refused(server):
    with httpx.Client(base_url=server.url) as c:
        try:
            r = c.get("/v1/models", headers={"x-big": "a" * (CAPS["max_header_bytes"] + 100)})
        except httpx.HTTPError:
            return  # connection refused outright: also fine
        assert r.status_code in (400, 431)


def test_malformed_json_content_type_and_utf8(client):
    json_header = {"content-type": "application/json"}
    assert_error(client.post("/v1/completions", content=b'{"prompt": "x",', headers=json_header), 400)
    assert_error(client.post("/v1/completions", content=b"prompt=x", headers={"content-type": "text/plain"}), 415)
    assert_error(client.post("/v1/completions", content=b'{"prompt": "\xff\xfe"}', headers=json_header), 400, "UTF-8")
    assert_error(
        client.post("/v1/completions", content=b'{"prompt": "\\ud800"}', headers=json_header), 400, "surrogate"
    )
    assert_error(
        client.post("/v1/completions", content=b'{"prompt": "x", "temperature": NaN}', headers=json_header), 400
    )


def test_errors_do_not_echo_input(client):
    huge = "Z" * 50_000
    for body in (
        {"prompt": "x", "temperature": huge},
        {"model": huge, "prompt": "x"},
        {"prompt": "x", "stop": [huge]},
        {"messages": [{"role": huge, "content": "x"}]},
    ):
        path = "/v1/chat/completions" if "messages" in body else "/v1/completions"
        r = client.post(path, json=body)
        assert r.status_code in (400, 431)
        assert len(r.content) < 2000


def test_no_chat_template_is_400(strict_server):
    r = httpx.post(
        strict_server.url + "/v1/chat/completions",
        headers={"Authorization": f"Bearer {API_KEY}"},
        json={"messages": [{"role": "user", "content": "hi"}]},
        timeout=30,
    )
    assert_error(r, 400, "chat template")


@pytest.mark.slow
def test_queue_full_is_503_with_retry_after(strict_server):
    """max_num_seqs 2 + max_queued_requests 1: a fourth concurrent request is refused.

    The engine's step gate is held, so the three admitted requests cannot finish before the
    fourth arrives, however fast the machine; released, they run to their end."""
    headers = {"Authorization": f"Bearer {API_KEY}"}
    results: list[int] = []

    def long_request() -> None:
        r = httpx.post(
            strict_server.url + "/v1/completions",
            headers=headers,
            timeout=120,
            json={"prompt": "busy", "max_tokens": 8, "ignore_eos": True},  # the held gate, not length, keeps it busy
        )
        results.append(r.status_code)

    threads = [threading.Thread(target=long_request) for _ in range(3)]
    with strict_server.state.engine.gate.held():
        for t in threads:
            t.start()
        wait_for(lambda: strict_server.state.num_admitted == 3, "three requests are admitted")
        fourth = {"prompt": "x", "max_tokens": 1}
        r = httpx.post(strict_server.url + "/v1/completions", headers=headers, json=fourth, timeout=30)
        assert_error(r, 503, "capacity")
        assert r.headers["retry-after"]
        assert strict_server.state.num_admitted == 3  # nothing finished, nothing leaked by the refusal
    for t in threads:
        t.join(120)
    assert results == [200, 200, 200]
    assert strict_server.state.num_admitted == 0


def test_request_that_can_never_fit_is_refused(strict_server):
    headers = {"Authorization": f"Bearer {API_KEY}"}
    r = httpx.post(
        strict_server.url + "/v1/completions",
        headers=headers,
        timeout=30,
        json={"prompt": "x", "max_tokens": 2, "n": 99},
    )
    assert_error(r, 400, "n is 99")
    r = httpx.post(
        strict_server.url + "/v1/completions", headers=headers, timeout=30, json={"prompt": [5] * 600, "max_tokens": 2}
    )
    assert_error(r, 400, "600", "512")
    # more prompts than the server ever holds (2 running + 1 queued): a 400, where a 503 said "retry later"
    r = httpx.post(
        strict_server.url + "/v1/completions", headers=headers, timeout=30, json={"prompt": ["x"] * 4, "max_tokens": 2}
    )
    assert_error(r, 400, "needs 4 engine requests", "the 3 this server holds")
    assert strict_server.state.num_admitted == 0


def test_raw_garbage_request_line(server):
    host, port = server.url.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port)), timeout=30) as sock:
        sock.sendall(b"\x00\xff GARBAGE\r\n\r\n")
        reply = sock.recv(1024)
    assert reply == b"" or reply.startswith(b"HTTP/1.1 4")
