"""X-Request-Id on every response (`--enable-request-id-headers`, vLLM's flag).

The client's own X-Request-Id comes back as it was sent, so a client or a proxy can match its logs to
ours; a request without one (or with one longer than MAX_ID_CHARS, or not printable ASCII) gets a new
random id. Every response carries it, refusals, errors and streams included: the middleware wraps the
whole app, outside Starlette's error handler too (app.py), and the answers the HTTP layer writes to the
socket before any app runs (431, 400 for invalid HTTP, 408, 429: http_layer.py) carry one as well,
the client's when it is among the head bytes in hand (`id_in_head`), else a new one.
"""

from __future__ import annotations

import uuid

from starlette.types import ASGIApp, Message, Receive, Scope, Send

HEADER = b"x-request-id"
MAX_ID_CHARS = 256
"""Longest client id echoed back; a longer one is replaced, not cut."""


def request_id(headers: list[tuple[bytes, bytes]]) -> bytes:
    """The id to answer with: the client's X-Request-Id when it is short printable ASCII, else a new one."""
    return client_id(headers) or new_id()


def new_id() -> bytes:
    """A fresh id for a response whose request sent none we can echo."""
    return uuid.uuid4().hex.encode()


def client_id(headers: list[tuple[bytes, bytes]] | None) -> bytes | None:
    """The client's X-Request-Id when it is short printable ASCII (one we echo and name responses by)."""
    for name, value in headers or ():
        if name.lower() == HEADER and 0 < len(value) <= MAX_ID_CHARS and all(32 <= c < 127 for c in value):
            return value
    return None


def id_in_head(head: bytes) -> bytes | None:
    """The client's X-Request-Id in raw request-head bytes (a head refused before it was parsed), if any;
    only a complete header line counts (one cut off at the end of the bytes could be a cut id)."""
    fields = (line.partition(b":") for line in head.split(b"\r\n")[:-1])
    return client_id([(name.strip(), value.strip()) for name, _, value in fields])


def response_id(prefix: str, headers: list[tuple[bytes, bytes]] | None, engine_id: str) -> str:
    """A response's `id`: `prefix-<the client's X-Request-Id>` as vLLM names it, when the header is short
    printable ASCII; else the engine request's own id. The engine's ids stay unique whatever clients send."""
    value = client_id(headers)
    return f"{prefix}-{value.decode()}" if value is not None else engine_id


class RequestIdMiddleware:
    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        value = request_id(scope["headers"])

        async def send_with_id(message: Message) -> None:
            if message["type"] == "http.response.start":
                headers = [(k, v) for k, v in message.get("headers", []) if k.lower() != HEADER]
                message = {**message, "headers": [*headers, (HEADER, value)]}
            await send(message)

        await self.app(scope, receive, send_with_id)
