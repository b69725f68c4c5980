"""Clients that hold connections without finishing a request (slowloris): the real server over raw sockets,
with each HTTP parser `mopt serve` may run (runtime/server/http_layer.py).

The head timeout is set to 0.5 s so the tests are quick, and they never measure it: each waits for the
server to close a connection (bounded only against a hang) and asserts on what the server answered and
on the connections it still holds, counted twice: uvicorn's own registry and the kernel's table of
established TCP connections on the server's port. The timer runs from the connection's accept, so a
client sends its partial head right after it connects: the only bet on this machine's speed is two
consecutive system calls within 0.5 s. The test that must see 25 connections held at once, before the
first one's timer fires, gives itself 2 s."""

from __future__ import annotations

import json
import socket

import httpx
import pytest

from model_optimizer.runtime.server.config import ServerConfig
from model_optimizer.runtime.server.http_layer import HeadLimits, guarded_h11, guarded_httptools
from tests.runtime.server.conftest import CAPS
from tests.runtime.server.live import metric, start_server, wait_for

HEADER_TIMEOUT = 0.5
MANY_HEADER_TIMEOUT = 2.0  # 25 connections opened one after another must all be held at once
HANG = 20.0  # seconds: only a bound on a hang, never a measurement
PARTIAL_HEAD = b"GET /v1/models HTTP/1.1\r\nHost: x\r\nX-Slow: "  # never ends


@pytest.fixture(scope="module")
def own_llm(tiny_model):
    from model_optimizer import LLM
    from tests.runtime.server.conftest import ENGINE_ARGS

    return LLM(str(tiny_model("qwen3")), **ENGINE_ARGS)


def parser_options(parser: str, config: ServerConfig) -> dict:
    limits = HeadLimits(config.max_header_bytes, config.header_timeout, config.max_connections_per_client)
    if parser == "h11":
        return {"http": guarded_h11(limits), "h11_max_incomplete_event_size": config.max_header_bytes}
    pytest.importorskip("httptools")
    return {"http": guarded_httptools(limits)}


@pytest.fixture(params=["httptools", "h11"])
def make_server(request, own_llm):
    started = []

    def make(**fields):
        config = ServerConfig(served_model_name="tiny", **{**CAPS, **fields})
        live = start_server(own_llm, config, http=parser_options(request.param, config))
        started.append(live)
        return live

    yield make
    for live in started:
        live.stop()


def connect(url: str, source: str = "127.0.0.1") -> socket.socket:
    host, port = url.removeprefix("http://").split(":")
    sock = socket.socket()
    sock.settimeout(HANG)
    sock.bind((source, 0))
    sock.connect((host, int(port)))
    return sock


def port_of(url: str) -> int:
    return int(url.rsplit(":", 1)[1])


def established_on(port: int) -> int:
    """Server-side TCP connections on `port` the kernel counts as established (/proc/net/tcp)."""
    count = 0
    with open("/proc/net/tcp") as table:
        for line in list(table)[1:]:
            fields = line.split()
            if int(fields[1].split(":")[1], 16) == port and fields[3] == "01":
                count += 1
    return count


def held(live) -> int:
    """Connections uvicorn's protocol objects hold."""
    return len(live.server.server_state.connections)


def read_until_closed(sock: socket.socket) -> bytes:
    """Everything the server sends until it closes (a reset after its reply counts as closed)."""
    data = b""
    while True:
        try:
            chunk = sock.recv(65536)
        except ConnectionResetError:
            return data
        if not chunk:
            return data
        data += chunk


def status_and_error(reply: bytes) -> tuple[int, dict]:
    head, _, body = reply.partition(b"\r\n\r\n")
    return int(head.split()[1]), json.loads(body)["error"]


def test_partial_heads_and_idle_connections_are_dropped(make_server):
    live = make_server(header_timeout=MANY_HEADER_TIMEOUT)
    port = port_of(live.url)
    slow, idle = [], []
    try:
        for _ in range(20):
            slow.append(connect(live.url))
            slow[-1].sendall(PARTIAL_HEAD)  # at once: the head timer runs from the accept
        idle.extend(connect(live.url) for _ in range(5))
        wait_for(lambda: held(live) == 25, "the server took all 25 connections")
        for sock in slow:
            status, error = status_and_error(read_until_closed(sock))
            assert status == 408 and error["code"] == 408 and f"{MANY_HEADER_TIMEOUT:g} s" in error["message"]
        for sock in idle:
            assert read_until_closed(sock) == b""  # nothing was asked: closed without a reply
        wait_for(lambda: held(live) == 0, "the server let go of every connection")
        assert established_on(port) == 0
    finally:
        for sock in slow + idle:
            sock.close()
    with connect(live.url) as sock:  # and it still serves
        sock.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n")
        assert sock.recv(65536).startswith(b"HTTP/1.1 200")


def test_a_kept_alive_connection_stalling_its_next_head_is_dropped(make_server):
    live = make_server(header_timeout=HEADER_TIMEOUT)
    with connect(live.url) as sock:
        sock.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n")
        first = sock.recv(65536)
        assert first.startswith(b"HTTP/1.1 200") and b"connection: close" not in first.lower()
        sock.sendall(PARTIAL_HEAD)  # uvicorn's keep-alive timer stops at this first byte
        status, _ = status_and_error(read_until_closed(sock))
        assert status == 408
    wait_for(lambda: held(live) == 0, "the server let go of the connection")


def test_a_request_being_served_is_not_cut_by_the_head_timeout(make_server):
    """A's request is complete, its stream held by a paused engine; B, opened after A, sends half a head.
    Once B has been dropped, A's head timer (armed earlier) has fired too, and A's stream must still
    run to its end when the engine resumes."""
    live = make_server(header_timeout=HEADER_TIMEOUT, enable_pause=True)
    body = json.dumps({"model": "tiny", "prompt": "hold me", "max_tokens": 4, "stream": True}).encode()
    head = (
        f"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
        f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n"
    )
    with httpx.Client(base_url=live.url, timeout=HANG) as client:
        assert client.post("/pause").json() == {"is_paused": True}
        with connect(live.url) as a:
            a.sendall(head.encode() + body)
            wait_for(lambda: metric(client.get("/metrics").text, "vllm:num_requests_waiting") == 1, "A is queued")
            with connect(live.url) as b:  # opened once A is queued: however long that took, B's timer is fresh
                b.sendall(PARTIAL_HEAD)
                assert status_and_error(read_until_closed(b))[0] == 408
            assert client.post("/resume").json() == {"is_paused": False}
            reply = read_until_closed(a)
    assert reply.startswith(b"HTTP/1.1 200") and b"data: [DONE]" in reply, reply[-300:]
    assert reply.endswith(b"0\r\n\r\n")  # the chunked stream's last chunk: it ran to its end


def test_a_body_that_stops_coming_is_answered_408(make_server):
    live = make_server(header_timeout=HEADER_TIMEOUT)
    body = json.dumps({"model": "tiny", "prompt": "hello world"}).encode()
    head = (
        f"POST /tokenize HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n"
    )
    with connect(live.url) as sock:
        sock.sendall(head.encode() + body[:5])  # then nothing
        status, error = status_and_error(read_until_closed(sock))
    assert status == 408 and "no byte of the request body came for 0.5 s" in error["message"]
    wait_for(lambda: held(live) == 0, "the server let go of the connection")


def test_one_client_address_holds_at_most_its_share(make_server):
    live = make_server(header_timeout=60.0, max_connections_per_client=4)
    port = port_of(live.url)
    mine = [connect(live.url) for _ in range(4)]
    try:
        wait_for(lambda: held(live) == 4, "the server took the first 4 connections")
        with connect(live.url) as fifth:
            status, error = status_and_error(read_until_closed(fifth))
            assert status == 429 and "at most 4" in error["message"]
        with connect(live.url, source="127.0.0.2") as other:  # another address has its own share
            other.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n")
            assert other.recv(65536).startswith(b"HTTP/1.1 200")
        wait_for(lambda: held(live) == 4, "the refused and the other address's connections are gone")
        assert established_on(port) == 4
        mine.pop().close()
        wait_for(lambda: held(live) == 3, "the server saw one of the 4 close")
        with connect(live.url) as again:  # a freed place can be taken
            again.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
            assert read_until_closed(again).startswith(b"HTTP/1.1 200")
    finally:
        for sock in mine:
            sock.close()


@pytest.mark.parametrize(
    "head",
    [
        b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\nContent-Length: 7\r\n\r\n12345",
        b"GET /health HTTP/1.1\r\nHost: x\r\nBad Header\r\n\r\n",
        b"\x00\x01garbage\r\n\r\n",
    ],
)
def test_an_invalid_http_request_gets_a_json_error(make_server, head):
    live = make_server()
    with connect(live.url) as sock:
        sock.sendall(head)
        reply = read_until_closed(sock)
    status, error = status_and_error(reply)
    assert status == 400 and error["type"] == "invalid_request_error" and "not valid HTTP" in error["message"]
    assert b"content-type: application/json" in reply.lower()


def test_config_refuses_a_non_finite_or_non_positive_header_timeout():
    for bad in (0, -1, float("nan"), float("inf")):
        with pytest.raises(ValueError, match="header_timeout"):
            ServerConfig(header_timeout=bad)
    with pytest.raises(ValueError, match="max_connections_per_client"):
        ServerConfig(max_connections_per_client=-1)


def test_mopt_serve_honours_header_timeout(tiny_model):
    """`mopt serve --header-timeout 0.5` as a process: the 408 names the configured timeout, not the default."""
    from tests.runtime.server.test_process import launch

    proc, url = launch(tiny_model("qwen3"), "--header-timeout", "0.5")
    try:
        with connect(url) as sock:
            sock.sendall(PARTIAL_HEAD)
            status, error = status_and_error(read_until_closed(sock))
        assert status == 408 and "0.5 s" in error["message"], error
    finally:
        proc.kill()
        proc.wait(30)
