"""CORS with refusals in the OpenAI error shape.

Starlette's CORSMiddleware answers a preflight it refuses (an origin, method or header not allowed)
with a plain-text 400, "Disallowed CORS origin", the one error of the server a client could not
parse as `{"error": {...}}`. This subclass answers it as every other error is answered, naming what
was refused; everything else (the allowed preflights, the headers on simple requests) is Starlette's.
"""

from __future__ import annotations

from starlette.datastructures import Headers
from starlette.middleware.cors import CORSMiddleware
from starlette.responses import Response

from model_optimizer.runtime.server.errors import error_response


class JSONCORSMiddleware(CORSMiddleware):
    def preflight_response(self, request_headers: Headers) -> Response:
        response = super().preflight_response(request_headers)
        if response.status_code != 400:
            return response
        refused = response.body.decode().removeprefix("Disallowed CORS ")  # e.g. "origin, headers"
        asked = {
            "origin": request_headers.get("origin"),
            "method": request_headers.get("access-control-request-method"),
            "headers": request_headers.get("access-control-request-headers"),
        }
        details = ", ".join(f"{part} {asked[part]!r}" if asked.get(part) else part for part in refused.split(", "))
        headers = {k: v for k, v in response.headers.items() if k.lower() not in ("content-length", "content-type")}
        return error_response(400, f"CORS preflight refused: {details} not allowed by this server", headers=headers)
