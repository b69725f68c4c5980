"""What the user adds to every request: --header KEY=VALUE and --extra-body JSON, as `vllm bench serve`
(`--header`, `--extra-body`) and genai-perf (`--header`, `--extra-inputs`) take them.

Both are checked when the ClientConfig is built, so a typo fails before any request (exit 2); both are
saved in the run's config, header values that look like credentials masked as the API key is.
"""

from __future__ import annotations

import functools
import json
import re

SECRET_HEADER = re.compile(r"auth|key|token|secret|password|cookie|credential|session", re.IGNORECASE)
"""Header names whose values are masked in saved runs."""
HEADER_NAME = re.compile(r"^[!#$%&'*+.^_`|~0-9A-Za-z-]+$")
"""An HTTP header name (RFC 9110 token)."""


def extra_headers(cfg) -> dict[str, str]:
    """The --header values of `cfg` as a dict; a ValueError naming the bad one."""
    return _parse_headers(tuple(cfg.header or ()))


@functools.lru_cache(maxsize=8)
def _parse_headers(items: tuple[str, ...]) -> dict[str, str]:
    headers: dict[str, str] = {}
    for item in items:
        name, sep, value = item.partition("=")
        name = name.strip()
        if not sep or not HEADER_NAME.match(name):
            raise ValueError(f"--header takes KEY=VALUE with an HTTP header name as KEY, got {item!r}")
        headers[name] = value.strip()
    return headers


def request_headers(cfg) -> dict[str, str]:
    """Every header the bench sends besides Content-Type: the API key's Authorization, then --header
    values (which win, e.g. another Authorization scheme)."""
    headers = {"Authorization": f"Bearer {cfg.api_key}"} if cfg.api_key else {}
    return headers | extra_headers(cfg)


def extra_body_of(cfg) -> dict | None:
    """The --extra-body object of `cfg`, or None; a ValueError when it is not a JSON object."""
    return _parse_extra_body(cfg.extra_body)


@functools.lru_cache(maxsize=8)
def _parse_extra_body(text: str | None) -> dict | None:
    if text is None:
        return None
    try:
        value = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ValueError(f"--extra-body is not valid JSON ({exc}): {text[:100]!r}") from None
    if not isinstance(value, dict):
        raise ValueError(f"--extra-body must be a JSON object ({{...}}), got {type(value).__name__}: {text[:100]!r}")
    return value


def masked_headers(items: list[str] | None) -> list[str] | None:
    """--header values as saved in a run: KEY=*** for names that look like credentials."""
    if items is None:
        return None
    return [f"{name}=***" if SECRET_HEADER.search(name) else f"{name}={value}" for name, value in _pairs(items)]


def _pairs(items: list[str]) -> list[tuple[str, str]]:
    return [(name.strip(), value.strip()) for name, _, value in (item.partition("=") for item in items)]
