"""Errors in OpenAI's shape: `{"error": {"message", "type", "param", "code"}}`, never FastAPI's 422.

Messages are cut to MAX_MESSAGE_CHARS so no error echoes a huge input back.
"""

from __future__ import annotations

import logging

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from pydantic import ValidationError
from starlette.exceptions import HTTPException as StarletteHTTPException

from model_optimizer.common.text import clip
from model_optimizer.runtime.engine.core_client import EngineDeadError
from model_optimizer.runtime.structured.grammar import OVER_LIMITS

logger = logging.getLogger(__name__)
MAX_MESSAGE_CHARS = 1000
ERROR_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    404: "not_found_error",
    405: "invalid_request_error",
    413: "invalid_request_error",
    415: "invalid_request_error",
    431: "invalid_request_error",
    500: "server_error",
    503: "service_unavailable",
}


class APIError(StarletteHTTPException):
    """An error the client should see with this status, message and (optionally) offending parameter.

    An HTTPException, so that FastAPI lets it through while it reads a body (runtime/server/body.py
    parses bodies then) instead of turning it into a generic 400."""

    def __init__(self, status_code: int, message: str, param: str | None = None, headers: dict | None = None) -> None:
        super().__init__(status_code, message, headers)
        self.message = message
        self.param = param

    def __str__(self) -> str:
        return self.message


def error_body(status_code: int, message: str, param: str | None = None) -> dict:
    error_type = ERROR_TYPES.get(status_code, "invalid_request_error" if status_code < 500 else "server_error")
    return {
        "error": {"message": clip(message, MAX_MESSAGE_CHARS), "type": error_type, "param": param, "code": status_code}
    }


def failure_status(message: str) -> int:
    """The status of a request the engine failed: 400 where its constraint outgrew the grammar engine's
    limits (the request's doing), else 500 (NaN logits, the grammar engine's own error)."""
    return 400 if message.startswith(OVER_LIMITS) else 500


def error_response(
    status_code: int, message: str, param: str | None = None, headers: dict | None = None
) -> JSONResponse:
    return JSONResponse(error_body(status_code, message, param), status_code=status_code, headers=headers)


def validation_message(exc: RequestValidationError | ValidationError) -> tuple[str, str | None]:
    """One readable line per pydantic error (location and reason, never the input itself)."""
    parts, param = [], None
    errors = exc.errors()
    own = [error for error in errors if error.get("type") == "value_error"]  # our checks' words, which say
    for error in (own or errors)[:5]:  # more than the union branches that failed beside them
        if error.get("type") == "json_invalid":  # its loc holds a byte offset, not a field
            reason = str((error.get("ctx") or {}).get("error", "")) or "malformed"
            return f"the body is not valid JSON: {clip(reason, 200)}", None
        loc = [str(p) for p in error.get("loc", ()) if p != "body" and not _branch_tag(p)]
        if param is None and loc:
            param = loc[0]
        where = ".".join(loc) or "body"
        reason = str(error.get("msg", "invalid value")).removeprefix("Value error, ")
        parts.append(f"{clip(where, 100)}: {clip(reason, 200)}")
    return "; ".join(parts) or "invalid request", param


def _branch_tag(part: object) -> bool:
    """A location part naming the union branch or validator pydantic tried (`str`, `list[TextPart]`,
    `function-wrap[validate_in_slices()]`), not a field of the request."""
    return isinstance(part, str) and (part in ("str", "int", "float", "bool", "dict", "list") or "[" in part)


def install_error_handlers(app: FastAPI) -> None:
    @app.exception_handler(APIError)
    async def api_error(_: Request, exc: APIError) -> JSONResponse:
        return error_response(exc.status_code, exc.message, exc.param, exc.headers)

    @app.exception_handler(RequestValidationError)
    async def invalid(_: Request, exc: RequestValidationError) -> JSONResponse:
        message, param = validation_message(exc)
        return error_response(400, message, param)

    @app.exception_handler(StarletteHTTPException)
    async def http_error(_: Request, exc: StarletteHTTPException) -> JSONResponse:
        return error_response(exc.status_code, str(exc.detail), headers=getattr(exc, "headers", None))

    @app.exception_handler(EngineDeadError)
    async def engine_dead(_: Request, exc: EngineDeadError) -> JSONResponse:  # any route that asked the core
        return error_response(500, str(exc))  # no traceback: the engine's failure is logged where it is seen

    @app.exception_handler(Exception)
    async def unexpected(_: Request, exc: Exception) -> JSONResponse:
        logger.exception("unexpected error")
        return error_response(500, f"internal error: {type(exc).__name__}")
