"""API-key check: deny by default, constant-time comparison.

Only exact public paths (/health, /ping, /ready, /metrics unless --metrics-auth) skip the key; every other path (unknown ones, `//v1/models`, `/V1/models`,
`/v1/models/`, percent-encoded variants) needs it, so no spelling of a route gets around it.
"""

from __future__ import annotations

import hashlib
import hmac

from model_optimizer.runtime.server.config import ServerConfig


def route_path(scope: dict) -> str:
    """The request's path as the routes see it: without --root-path where it starts with it (a proxy that
    does not strip it), the rule Starlette's router applies, so the key check and the routing read the
    same path."""
    path, root = scope["path"], scope.get("root_path", "")
    if root and path.startswith(root + "/"):
        return path[len(root) :]
    return path


def is_public(path: str, config: ServerConfig) -> bool:
    """/health (and vLLM's name for it, /ping) and /ready are for orchestrator probes, which carry no key;
    /metrics unless --metrics-auth."""
    if path in ("/health", "/ping", "/ready"):
        return True
    return path == "/metrics" and not config.metrics_auth


def authorized(headers: list[tuple[bytes, bytes]], api_keys: tuple[str, ...]) -> bool:
    """True when an `Authorization: Bearer <key>` header holds one of the keys (each compared in constant time)."""
    expected = [hashlib.sha256(key.encode()).digest() for key in api_keys]
    ok = False
    for name, value in headers:
        if name.lower() != b"authorization":
            continue
        scheme, _, token = value.partition(b" ")
        given = hashlib.sha256(token.strip()).digest()
        for digest in expected:
            ok |= scheme.lower() == b"bearer" and hmac.compare_digest(given, digest)
    return ok
