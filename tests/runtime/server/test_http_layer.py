"""The server's HTTP layer (runtime/server/http_layer.py): httptools with a bound on each request's head, as
`mopt serve` runs it, on the real server over raw sockets (the bound is about bytes on the wire)."""

from __future__ import annotations

import json
import socket

import pytest

from model_optimizer.runtime.server.http_layer import uvicorn_http_options
from tests.runtime.server.conftest import CAPS

LIMIT = CAPS["max_header_bytes"]

pytest.importorskip("httptools")


def connect(url: str) -> socket.socket:
    host, port = url.removeprefix("http://").split(":")
    return socket.create_connection((host, int(port)), timeout=30)


def read_response(sock: socket.socket) -> tuple[int, dict, bytes]:
    """One response (status, headers, body by content-length); the body of a close-delimited one as read."""
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = sock.recv(65536)
        if not chunk:
            raise ConnectionError(f"closed before a full head: {data[:200]!r}")
        data += chunk
    head, rest = data.split(b"\r\n\r\n", 1)
    lines = head.decode("latin-1").split("\r\n")
    status = int(lines[0].split()[1])
    headers = {k.strip().lower(): v.strip() for k, v in (line.split(":", 1) for line in lines[1:])}
    length = int(headers.get("content-length", len(rest)))
    while len(rest) < length:
        chunk = sock.recv(65536)
        if not chunk:
            break
        rest += chunk
    return status, headers, rest[:length]


def models_head(size: int) -> bytes:
    """A GET /v1/models head of exactly `size` bytes (padded with one custom header)."""
    base = b"GET /v1/models HTTP/1.1\r\nHost: x\r\nX-Pad: \r\n\r\n"
    return base.replace(b"X-Pad: ", b"X-Pad: " + b"a" * (size - len(base)))


def is_closed(sock: socket.socket) -> bool:
    try:
        return sock.recv(1) == b""
    except ConnectionResetError:
        return True


def test_mopt_serve_runs_httptools_when_installed():
    options = uvicorn_http_options(LIMIT)
    assert options["http"].__name__ == "GuardedHttpToolsProtocol" and options["http"].limits.max_header_bytes == LIMIT


def test_a_head_at_the_bound_is_served_and_one_byte_more_is_431(server):
    with connect(server.url) as sock:
        sock.sendall(models_head(LIMIT))
        status, _, body = read_response(sock)
        assert status == 200 and json.loads(body)["data"]
    with connect(server.url) as sock:
        sock.sendall(models_head(LIMIT + 1))
        status, headers, body = read_response(sock)
        assert status == 431 and headers["connection"] == "close"
        error = json.loads(body)["error"]
        assert error["code"] == 431 and str(LIMIT) in error["message"]
        assert is_closed(sock)


@pytest.mark.parametrize("piece", [7, 1000])
def test_a_head_sent_in_pieces_is_counted_across_reads(server, piece):
    """However the reads split it (the blank line too), LIMIT bytes pass and LIMIT + 1 do not: the app's
    own check (guard.py) counts names and values only, so only the wire count refuses LIMIT + 1."""
    for size, expected in ((LIMIT, 200), (LIMIT + 1, 431)):
        head = models_head(size)
        with connect(server.url) as sock:
            try:
                for start in range(0, len(head), piece):
                    sock.sendall(head[start : start + piece])
            except OSError:
                pass  # refused and closed while still sending: the reply is waiting
            status, _, _ = read_response(sock)
        assert status == expected, (size, piece)


def test_a_body_larger_than_the_head_bound_is_not_counted(server):
    prompt = "hello " * (2 * LIMIT // 6)  # ~2x the head bound, well under the body cap
    body = json.dumps({"model": "tiny", "prompt": prompt, "max_tokens": 1, "temperature": 0}).encode()
    assert LIMIT < len(body) < CAPS["max_body_bytes"]
    head = (
        f"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
        f"Content-Length: {len(body)}\r\n\r\n"
    ).encode()
    with connect(server.url) as sock:
        sock.sendall(head + body)  # head and body in one write: the body must not count as head
        status, _, reply = read_response(sock)
    assert status != 431, reply[:300]


def test_each_request_on_a_kept_alive_connection_gets_its_own_bound(server):
    with connect(server.url) as sock:
        for _ in range(3):  # three heads that together exceed the bound, each within it
            sock.sendall(models_head(LIMIT // 2))
            status, headers, _ = read_response(sock)
            assert status == 200 and headers.get("connection") != "close"
        sock.sendall(models_head(LIMIT + 10))
        status, _, _ = read_response(sock)
        assert status == 431
