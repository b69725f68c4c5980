"""The HTTP layer under uvicorn: bounds on what a client's request head may cost the server.

Every streamed chunk goes through the HTTP protocol's send, and at hundreds of streams that is a
large share of the event loop; httptools' send costs less CPU per chunk than h11's, and steps got
shorter with it (benchmarks/serving_overhead.py; figures in README "Serving benchmark and logprobs",
benchmarks/results/serving_overhead_gpu_h200_{h11,serve}.json). So `mopt serve` runs uvicorn's
httptools protocol, and h11 only where httptools is not installed. Both get the same guards:

- Head size: httptools has no bound on how many bytes a request line and headers may take (h11 has
  one, `h11_max_incomplete_event_size`), so the httptools protocol counts a head's bytes as they
  arrive, before the parser buffers them, and answers a head over the bound 431.
- Head time (slowloris): uvicorn times out a kept-alive connection only until its first byte, and
  a new connection never, so a client sending a head a byte at a time held a descriptor forever.
  From connecting, and from the end of each response, a client has `header_timeout` seconds to
  complete a request's head; then the connection is closed (408 when part of a head had come). A
  request being served (its body read, its response streamed) is never timed out here.
- Connections per client address: at most `max_connections_per_client` open at once; the next one
  is answered 429 and closed. Behind a proxy every connection comes from the proxy's address, so
  there the limit is the proxy's (0 turns it off).
- Parser errors (a malformed head, two Content-Length headers) answer 400 in the OpenAI error shape,
  as every other error of the server does, instead of uvicorn's plain text.
- With --enable-request-id-headers these answers carry X-Request-Id as the app's do: the client's
  when it is in the bytes that were refused, else a new one (named in the log line, to match them).
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections import Counter
from dataclasses import dataclass
from typing import Any

from model_optimizer.runtime.server.errors import error_body
from model_optimizer.runtime.server.request_ids import HEADER, id_in_head, new_id

logger = logging.getLogger(__name__)
HEAD_END = b"\r\n\r\n"
INVALID_HTTP = "the request is not valid HTTP/1.1 (a malformed request line or header, or conflicting Content-Length)"


@dataclass(frozen=True)
class HeadLimits:
    """What one connection may cost before its request is served (ServerConfig's fields of the same names)."""

    max_header_bytes: int
    header_timeout: float
    max_connections_per_client: int
    """0: no limit."""


def uvicorn_http_options(
    max_header_bytes: int, header_timeout: float = 10.0, max_connections_per_client: int = 1024
) -> dict[str, Any]:
    """uvicorn.Config keyword arguments for the HTTP layer (mopt serve and the tests' live server):
    httptools when installed, else h11, each with the guards above."""
    limits = HeadLimits(max_header_bytes, header_timeout, max_connections_per_client)
    try:
        return {"http": guarded_httptools(limits)}
    except ImportError:
        return {"http": guarded_h11(limits), "h11_max_incomplete_event_size": max_header_bytes}


def json_response_bytes(status: int, reason: str, message: str, default_headers: list[tuple[bytes, bytes]]) -> bytes:
    """A whole `Connection: close` response with an OpenAI-style error body, written straight to the socket."""
    body = json.dumps(error_body(status, message)).encode()
    head = [f"HTTP/1.1 {status} {reason}\r\n".encode()]
    head += [name + b": " + value + b"\r\n" for name, value in default_headers]
    head.append(b"content-type: application/json\r\ncontent-length: %d\r\nconnection: close\r\n\r\n" % len(body))
    return b"".join(head) + body


class ConnectionGuard:
    """Mixed in before a uvicorn HTTP protocol class: the head timer, the per-client count and JSON 400s.

    uvicorn builds one protocol object per connection from the class, so the limits and the count of
    each client's connections are class attributes of a subclass made per server (`_guarded`)."""

    limits: HeadLimits
    per_client: Counter
    # set by uvicorn's protocol classes
    loop: asyncio.AbstractEventLoop
    transport: asyncio.Transport
    client: tuple[str, int] | None
    cycle: Any
    config: Any
    server_state: Any

    def connection_made(self, transport: asyncio.Transport) -> None:
        super().connection_made(transport)  # type: ignore[misc]
        self._head_timer: asyncio.TimerHandle | None = None
        self._head_begun = False  # a byte of the next head arrived since the timer was armed
        self._counted_host: str | None = None
        self._last_read = b""
        host = self.client[0] if self.client else None
        cap = self.limits.max_connections_per_client
        if host is not None and cap:
            if self.per_client[host] >= cap:
                logger.warning("refused a connection from %s: it already has %d open", host, cap)
                message = f"too many connections from {host}: at most {cap} at once"
                self._answer_and_close(429, "Too Many Requests", message)
                return
            self.per_client[host] += 1
            self._counted_host = host
        self._arm_head_timer()

    def connection_lost(self, exc: Exception | None) -> None:
        self._cancel_head_timer()
        if self._counted_host is not None:
            self.per_client[self._counted_host] -= 1
            if not self.per_client[self._counted_host]:
                del self.per_client[self._counted_host]
            self._counted_host = None
        super().connection_lost(exc)  # type: ignore[misc]

    def data_received(self, data: bytes) -> None:
        if self._head_timer is not None:
            self._head_begun = True
        self._last_read = data  # where a refusal looks for the client's X-Request-Id
        super().data_received(data)  # type: ignore[misc]

    def on_response_complete(self) -> None:
        super().on_response_complete()  # type: ignore[misc]
        if not self.transport.is_closing():
            self._arm_head_timer()  # the next head (or uvicorn's keep-alive timeout) starts now

    def send_400_response(self, msg: str) -> None:
        logger.warning("refused a request that is not valid HTTP from %s", self.client[0] if self.client else "?")
        self._answer_and_close(400, "Bad Request", INVALID_HTTP)

    def _serving(self) -> bool:
        """A request's head has come and its response is not finished: its time is not the head's."""
        return self.cycle is not None and not self.cycle.response_complete

    def _arm_head_timer(self) -> None:
        self._cancel_head_timer()
        self._head_begun = False
        self._head_timer = self.loop.call_later(self.limits.header_timeout, self._head_timed_out)

    def _cancel_head_timer(self) -> None:
        if self._head_timer is not None:
            self._head_timer.cancel()
            self._head_timer = None

    def _head_timed_out(self) -> None:
        self._head_timer = None
        if self._serving() or self.transport.is_closing():
            return  # the response's end arms the timer again
        if not self._head_begun:
            self.transport.close()  # idle: nothing to answer
            return
        logger.info(
            "closed a connection from %s: no complete request head within %g s",
            self._host(),
            self.limits.header_timeout,
        )
        self._answer_and_close(
            408, "Request Timeout", f"the request line and headers took longer than {self.limits.header_timeout:g} s"
        )

    def _answer_and_close(self, status: int, reason: str, message: str) -> None:
        headers = self.server_state.default_headers
        if _request_id_headers(self.config.app):
            value = id_in_head(self._last_read) or new_id()
            logger.info("answered %d to %s with X-Request-Id %s", status, self._host(), value.decode())
            headers = [*headers, (HEADER, value)]
        self.transport.write(json_response_bytes(status, reason, message, headers))
        self.transport.close()

    def _host(self) -> str:
        return self.client[0] if self.client else "?"


def _request_id_headers(app: Any) -> bool:
    """Whether the served app answers with X-Request-Id (--enable-request-id-headers): the HTTP layer's
    own answers then carry it too. uvicorn's config holds the app `create_app` built."""
    server = getattr(getattr(app, "state", None), "server", None)
    return bool(server is not None and server.config.enable_request_id_headers)


def _guarded(protocol: type, limits: HeadLimits, name: str, extra: dict | None = None) -> type:
    return type(name, (ConnectionGuard, protocol), {"limits": limits, "per_client": Counter(), **(extra or {})})


def guarded_h11(limits: HeadLimits) -> type:
    """uvicorn's h11 protocol with the guards (its own `h11_max_incomplete_event_size` bounds the head)."""
    from uvicorn.protocols.http.h11_impl import H11Protocol

    return _guarded(H11Protocol, limits, "GuardedH11Protocol")


def guarded_httptools(limits: HeadLimits) -> type:
    """uvicorn's httptools protocol with the guards and a bound on a head's bytes (431 past it).

    Raises ImportError when httptools is not installed."""
    import httptools  # noqa: F401  (uvicorn's module imports it too; fail here, not per connection)
    from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

    class HeadBytesBound:
        """Counts a head's bytes as they arrive; the bound is `limits.max_header_bytes`."""

        def connection_made(self, transport: asyncio.Transport) -> None:
            self._in_head = True
            self._head_bytes = 0
            self._head_tail = b""  # the head's last 3 bytes: its blank line may be split across reads
            super().connection_made(transport)  # type: ignore[misc]

        def data_received(self, data: bytes) -> None:
            if self._in_head:
                window = self._head_tail + data
                end = window.find(HEAD_END)
                self._head_bytes += len(data) if end < 0 else end + len(HEAD_END) - len(self._head_tail)
                if self._head_bytes > self.limits.max_header_bytes:
                    self._refuse_head()
                    return
                if end < 0:
                    self._head_tail = window[-(len(HEAD_END) - 1) :]
                else:
                    self._in_head = False
            super().data_received(data)  # type: ignore[misc]

        def on_message_complete(self) -> None:
            super().on_message_complete()  # type: ignore[misc]
            # the next request on this connection starts its own count (a request pipelined into the
            # same read as this one's end is counted from the next read on: still bounded by a read)
            self._in_head, self._head_bytes, self._head_tail = True, 0, b""

        def _refuse_head(self) -> None:
            if self._serving():
                # a head pipelined behind a response still being sent: a 431 would land inside that
                # response's bytes, so the connection is dropped instead
                self.transport.close()
                return
            limit = self.limits.max_header_bytes
            logger.warning("refused a request whose head exceeds %d bytes", limit)
            message = f"request line and headers exceed {limit} bytes"
            self._answer_and_close(431, "Request Header Fields Too Large", message)

    return _guarded(
        type("HeadBytesHttpTools", (HeadBytesBound, HttpToolsProtocol), {}), limits, "GuardedHttpToolsProtocol"
    )
