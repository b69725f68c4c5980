"""Request bodies decoded and validated off the event loop, big lists validated a slice at a time.

FastAPI decodes a JSON body with json.loads and validates it with pydantic on the event loop: a
5.4 MB token-id prompt held /health for 4 s, a 250,000-message chat for 6 s. Routes still declare
their body model (it shapes /openapi.json), but their router's route class, `ParsedBodyRoute`, hands
FastAPI a request whose `json()` is the model already validated, so FastAPI's own validation of it is
a no-op. A body over INLINE_BYTES is decoded and validated in the server's worker threads:

- decoding is pydantic-core's JSON parser (3-5x json.loads), which also refuses lone surrogates
  (`"\\ud800"` is not text, in any field: `stop`, `chat_template_kwargs`, ...);
- long lists (`in_slices`) are validated SLICE items per call: pydantic-core holds the GIL for the
  whole of one call, so one call on a million items would stall the event loop as surely as running
  it there; between slices the worker lets the loop run.

What still holds the GIL in one piece is the decoding itself (the JSON parser's one call over the
whole body, bounded by --max-body-bytes).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

import pydantic_core
from fastapi import Request
from fastapi.routing import APIRoute
from pydantic import BaseModel, ValidationError, WrapValidator
from pydantic_core import PydanticKnownError
from starlette.responses import Response

from model_optimizer.runtime.server.errors import APIError, validation_message

logger = logging.getLogger(__name__)
INLINE_BYTES = 64 << 10
"""Bodies up to this size are parsed on the event loop: a thread hop would cost more than they do."""
SLICE = 1024
"""Items of a list validated per pydantic call (1024 chat messages: a few ms)."""


def in_slices(max_length: int | None = None) -> WrapValidator:
    """A list validated SLICE items at a time (the item errors keep their index in the whole list).

    `max_length` is checked here, before any item: a Field's max_length would only see one slice."""

    def validate_in_slices(value: Any, handler: Callable[[Any], Any]) -> Any:
        if not isinstance(value, list) or len(value) <= SLICE:
            return handler(value)
        if max_length is not None and len(value) > max_length:
            context = {"field_type": "List", "max_length": max_length, "actual_length": len(value)}
            raise PydanticKnownError("too_long", context)
        out: list = []
        for start in range(0, len(value), SLICE):
            try:
                out += handler(value[start : start + SLICE])
            except ValidationError as exc:
                raise _shifted(exc, start) from None
        return out

    return WrapValidator(validate_in_slices)


def _shifted(exc: ValidationError, offset: int) -> ValidationError:
    """`exc` of one slice, its item indices made indices in the whole list."""
    errors = []
    for error in exc.errors(include_url=False):
        loc = error["loc"]
        if loc and isinstance(loc[0], int):
            loc = (loc[0] + offset, *loc[1:])
        detail = {"type": error["type"], "loc": loc, "input": error["input"]}
        if error.get("ctx"):
            detail["ctx"] = error["ctx"]
        errors.append(detail)
    return ValidationError.from_exception_data(exc.title, errors)


def parse_body(model: type[BaseModel], body: bytes) -> BaseModel:
    """The body as `model`; APIError 400 for JSON that is not JSON (or not text) or does not fit the model."""
    try:
        data = pydantic_core.from_json(body, cache_strings="keys")
    except ValueError as exc:
        reason = str(exc)
        if "surrogate" in reason or "end of hex escape" in reason:  # valid JSON syntax, but not text
            where = reason[reason.find(" at line ") :] if " at line " in reason else ""
            raise APIError(
                400, f"a string of the body is not text: a lone surrogate \\u escape (such as \\ud800){where}"
            ) from None
        if "recursion limit" in reason:  # valid JSON, nested deeper than the parser goes (~128 levels)
            raise APIError(400, "the body nests arrays and objects deeper than the server reads") from None
        raise APIError(400, f"the body is not valid JSON: {reason}") from None
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        message, param = validation_message(exc)
        raise APIError(400, message, param) from None


class ParsedBodyRequest(Request):
    """A request whose `json()` is its body parsed into `model`, in a worker thread when it is large."""

    def __init__(self, request: Request, model: type[BaseModel]) -> None:
        super().__init__(request.scope, request.receive, request._send)
        self.model = model

    async def json(self) -> Any:
        if not hasattr(self, "_json"):
            body = await self.body()
            try:
                if len(body) <= INLINE_BYTES:
                    self._json = parse_body(self.model, body)
                else:
                    self._json = await self.app.state.server.run_blocking(parse_body, self.model, body)
            except APIError:
                raise
            except Exception as exc:  # a bug of ours: a 500, not FastAPI's "error parsing the body" 400
                logger.exception("parsing a request body failed")
                raise APIError(500, f"internal error: {type(exc).__name__}") from None
        return self._json


class ParsedBodyRoute(APIRoute):
    """An APIRoute whose JSON body model is parsed by `ParsedBodyRequest` (FastAPI's documented way to
    change how a route reads its request: a custom route class)."""

    def get_route_handler(self) -> Callable[[Request], Any]:
        handler = super().get_route_handler()
        model = self.body_field.field_info.annotation if self.body_field is not None else None
        if not (isinstance(model, type) and issubclass(model, BaseModel)):
            return handler

        async def parsed_then_handled(request: Request) -> Response:
            return await handler(ParsedBodyRequest(request, model))

        return parsed_then_handled
