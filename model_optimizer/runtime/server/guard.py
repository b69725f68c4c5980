"""GuardMiddleware: everything checked before a route runs, as plain ASGI.

Order: header size (431; uvicorn's h11 limit only covers headers that arrive in pieces), API key (401), then body size (413, from Content-Length and while reading, before any
parsing; the rest of a refused body, up to DRAIN_BYTES, is read and dropped first so that the answer reaches a client still sending; 408 when the body pauses longer than --header-timeout), then content encoding (415 unless none or identity), content type (415 unless none, application/json or
application/*+json, as FastAPI reads them) and UTF-8 (400), checked only where a route takes the method at
the path (elsewhere the router's 404 or 405 is the answer, whatever the body). The body read here is replayed to the app;
later `receive()` calls go to the client, so routes can still notice a disconnect.
"""

from __future__ import annotations

import asyncio

from fastapi.responses import JSONResponse
from starlette.routing import Match
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from model_optimizer.runtime.server.auth import authorized, is_public, route_path
from model_optimizer.runtime.server.errors import error_response
from model_optimizer.runtime.server.state import ServerState

BODY_METHODS = {"POST", "PUT", "PATCH"}
CLOSE = {"Connection": "close"}
DRAIN_BYTES = 64 << 20
"""The most of a refused (413) body read and dropped before the answer goes: a client that sends its whole
body before it reads met a reset instead of the 413 (the server closed with its bytes unread)."""
DRAIN_IDLE_S = 0.5
"""How long the drain waits for more of such a body: a client that sent only the headers and waits for the
answer gets it after this, not after --header-timeout."""


class GuardMiddleware:
    def __init__(self, app: ASGIApp, state: ServerState) -> None:
        self.app = app
        self.state = state

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        config = self.state.config
        headers = scope["headers"]
        header_bytes = len(scope.get("raw_path") or b"") + len(scope.get("query_string", b""))
        header_bytes += sum(len(k) + len(v) + 4 for k, v in headers)
        if header_bytes > config.max_header_bytes:
            response = error_response(
                431, f"request line and headers exceed {config.max_header_bytes} bytes", headers={"Connection": "close"}
            )
            await response(scope, receive, send)
            return
        if config.api_key and not is_public(route_path(scope), config) and not authorized(headers, config.api_keys):
            response = error_response(
                401,
                "missing or invalid API key (send Authorization: Bearer KEY)",
                headers={"WWW-Authenticate": "Bearer"},
            )
            await response(scope, receive, send)
            return
        if scope["method"] not in BODY_METHODS:
            await self.app(scope, receive, send)
            return
        problem, body = await self._read_body(scope, receive)
        if problem is None and body:
            problem = _content_problem(scope, body)
            if problem is not None and not _routed(scope):
                problem = None  # the router answers 404 or 405, whatever the body: the checks are a route's
        if problem is not None:
            await problem(scope, receive, send)
            return
        if body and _header(scope, b"content-type") is None:  # JSON, as vLLM reads it (FastAPI now would not)
            scope = {**scope, "headers": [*headers, (b"content-type", b"application/json")]}
        await self.app(scope, _replay(body, receive), send)

    async def _read_body(self, scope: Scope, receive: Receive):
        """(error response or None, body bytes)."""
        limit = self.state.config.max_body_bytes
        length = _header(scope, b"content-length")
        if length is not None and (not length.isdigit() or int(length) > limit):
            waits = (_header(scope, b"expect") or "").lower() == "100-continue"  # sends nothing until answered
            if length.isdigit() and int(length) <= DRAIN_BYTES and not waits:
                await self._drain(receive)
            return _too_large(limit, length), b""
        chunks, size = [], 0
        while True:
            try:  # a client pausing mid-body holds a connection as a slow head would (http_layer.py)
                message = await asyncio.wait_for(receive(), self.state.config.header_timeout)
            except asyncio.TimeoutError:
                pause = self.state.config.header_timeout
                return error_response(408, f"no byte of the request body came for {pause:g} s", headers=CLOSE), b""
            if message["type"] == "http.disconnect":
                return error_response(400, "client disconnected"), b""
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > limit:
                if message.get("more_body", False):
                    await self._drain(receive)
                return _too_large(limit, None), b""
            chunks.append(chunk)
            if not message.get("more_body", False):
                break
        return None, b"".join(chunks)

    async def _drain(self, receive: Receive) -> None:
        """Read and drop the rest of a refused body, up to DRAIN_BYTES, while its bytes keep coming."""
        drained = 0
        idle = min(DRAIN_IDLE_S, self.state.config.header_timeout)
        while drained <= DRAIN_BYTES:
            try:
                message = await asyncio.wait_for(receive(), idle)
            except asyncio.TimeoutError:
                return
            if message["type"] == "http.disconnect":
                return
            drained += len(message.get("body", b""))
            if not message.get("more_body", False):
                return


def _content_problem(scope: Scope, body: bytes) -> JSONResponse | None:
    """The error response for a body the routes cannot read (compressed, not JSON, not UTF-8), or None."""
    encoding = (_header(scope, b"content-encoding") or "").strip().lower()
    if encoding not in ("", "identity"):
        return error_response(415, f"Content-Encoding {encoding[:40]!r} is not supported: send the body uncompressed")
    if not is_json_type(_header(scope, b"content-type") or ""):
        return error_response(415, "send the body as JSON with Content-Type: application/json")
    try:
        body.decode("utf-8")
    except UnicodeDecodeError as exc:
        return error_response(400, f"the body is not valid UTF-8 (bad byte at offset {exc.start})")
    return None


def _routed(scope: Scope) -> bool:
    """Whether a route of the app takes this method at this path (Starlette sets scope["app"] before any
    middleware runs). Asked only for a body refused above, so a served request never pays for it."""
    router = getattr(scope.get("app"), "router", None)
    return router is None or any(route.matches(scope)[0] is Match.FULL for route in router.routes)


def is_json_type(content_type: str) -> bool:
    """A body FastAPI (and vLLM) read as JSON: no Content-Type at all, application/json, or application/*+json."""
    media = content_type.split(";")[0].strip().lower()
    if not media:
        return True
    main, _, sub = media.partition("/")
    return main == "application" and (sub == "json" or sub.endswith("+json"))


def _header(scope: Scope, name: bytes) -> str | None:
    for key, value in scope["headers"]:
        if key.lower() == name:
            return value.decode("latin-1")
    return None


def _too_large(limit: int, length: str | None):
    size = f" ({length[:20]} bytes)" if length and length.isdigit() else ""
    return error_response(413, f"request body too large{size}: at most {limit} bytes", headers={"Connection": "close"})


def _replay(body: bytes, receive: Receive) -> Receive:
    sent = False

    async def replayed() -> Message:
        nonlocal sent
        if not sent:
            sent = True
            return {"type": "http.request", "body": body, "more_body": False}
        return await receive()

    return replayed
