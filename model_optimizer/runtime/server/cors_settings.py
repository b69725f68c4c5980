"""The CORS settings of ServerConfig (allowed_origins, allowed_headers, allowed_methods), read from a list,
a JSON list or the flags' comma-separated text, each value checked: a wrong one fails at start-up, not
as a browser's silent refusal later.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable

HTTP_METHODS = {"*", "GET", "POST", "PUT", "PATCH", "DELETE", "HEAD", "OPTIONS"}
_HEADER_NAME = re.compile(r"[!#$%&'*+.^_`|~0-9A-Za-z-]+")


def _is_header_name(name: str) -> bool:
    return bool(_HEADER_NAME.fullmatch(name))


def _str_list(value: str | list[str] | None, field: str) -> list[str] | None:
    """A list, a JSON list or a comma-separated string (the CLI flag) -> a list, or None when empty."""
    if isinstance(value, str):
        text = value.strip()
        try:
            value = json.loads(text) if text.startswith("[") else [o.strip() for o in text.split(",") if o.strip()]
        except ValueError as exc:  # json's own message names no flag
            raise ValueError(f"{field} starts with '[' but is not a JSON list: {exc}") from None
    if value is not None and not isinstance(value, (list, tuple)):
        raise ValueError(f"{field} must be a list or comma-separated text, got {type(value).__name__}")
    return list(value) if value else None


def _names(value: str | list[str] | None, field: str, valid: Callable[[str], bool]) -> list[str] | None:
    """Header names or methods for CORS, each checked; None (CORS allows any) when empty."""
    value = _str_list(value, field)
    for item in value or []:
        if not isinstance(item, str) or not valid(item):
            what = "'*' or header names such as Content-Type" if field == "allowed_headers" else "'*' or GET, POST, ..."
            raise ValueError(f"{field} must be {what}, got {item!r}")
    return value


def header_names(value: str | list[str] | None) -> list[str] | None:
    """allowed_headers: '*' or header names; None (CORS allows any header) when empty."""
    return _names(value, "allowed_headers", _is_header_name)


def methods(value: str | list[str] | None) -> list[str] | None:
    """allowed_methods, upper-cased: '*' or GET, POST, ...; None (CORS allows any method) when empty."""
    found = _names(value, "allowed_methods", lambda m: m.upper() in HTTP_METHODS)
    return [m.upper() for m in found] if found else found


def origins(value: str | list[str] | None) -> list[str] | None:
    """Origins from a list or the CLI flag's string, or None."""
    value = _str_list(value, "allowed_origins")
    if not value:
        return None
    for origin in value:
        if not isinstance(origin, str) or not (origin == "*" or origin.startswith(("http://", "https://"))):
            raise ValueError(f"allowed_origins must be '*' or origins such as https://app.example, got {origin!r}")
    return [origin.rstrip("/") for origin in value]
