"""`http_requests_total` (handler, method, status), the counter vLLM's HTTP instrumentation exports, with exact
status codes: counted by a middleware outside every other one."""

from __future__ import annotations

from typing import TYPE_CHECKING

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from model_optimizer.runtime.server.auth import route_path

if TYPE_CHECKING:
    from model_optimizer.runtime.server.metrics import ServerMetrics

HANDLERS = frozenset(
    {
        "/v1/completions",
        "/v1/chat/completions",
        "/v1/responses",
        "/v1/responses/input_tokens",
        "/v1/embeddings",
        "/v1/models",
        "/health",
        "/ready",
        "/ping",
        "/version",
        "/metrics",
        "/tokenize",
        "/detokenize",
        "/pause",
        "/resume",
        "/is_paused",
    }
)
"""Paths counted under their own handler label; any other path is "other" (no label per random 404 path)."""


def _handler_label(path: str) -> str:
    """The `handler` label of a request path: the route's template, never the raw path."""
    if path in HANDLERS:
        return path
    if path.startswith("/v1/models/"):
        return "/v1/models/{id}"
    if path.startswith("/v1/responses/"):
        return "/v1/responses/{id}"
    return "other"


class HTTPMetricsMiddleware:
    """Counts every HTTP response by handler, method and status, outside every other middleware, so the
    401s, 413s and 431s the guard sends count too."""

    def __init__(self, app: ASGIApp, metrics: ServerMetrics) -> None:
        self.app = app
        self.metrics = metrics

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        status = 500  # an exception before any response start is a 500 to the client

        async def send_and_record(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
            await send(message)

        try:
            await self.app(scope, receive, send_and_record)
        finally:
            handler = _handler_label(route_path(scope))
            self.metrics.http_requests.labels(handler, scope["method"], str(status)).inc()
