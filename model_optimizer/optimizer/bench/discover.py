"""What the bench learns from the server before a run: the model name, its folder, its context.

GET /v1/models lists model cards. vLLM and `mopt serve` both put the model's folder (or hub id)
in `root` and its context length in `max_model_len`; when that folder is on this machine its
tokenizer.json tells the vocabulary, so random token-id prompts stay inside it.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import httpx

from model_optimizer.optimizer.bench.chunks import json_error_message
from model_optimizer.optimizer.bench.client import ClientConfig
from model_optimizer.optimizer.bench.request_options import request_headers

MAX_NAMES_SHOWN = 10
"""Served model names an unknown --model's error lists."""


@dataclass
class ServerModel:
    """The model card the bench uses, as far as the server described it."""

    id: str
    root: str | None = None
    max_model_len: int | None = None


async def list_models(cfg: ClientConfig) -> list[dict]:
    """The cards of GET /v1/models; raises httpx.HTTPError or ValueError when there are none."""
    async with httpx.AsyncClient(timeout=10.0, headers=request_headers(cfg)) as http:
        resp = await http.get(cfg.base_url + "/v1/models")
        resp.raise_for_status()
        data = resp.json().get("data")
    cards = [c for c in data if isinstance(c, dict) and isinstance(c.get("id"), str)] if isinstance(data, list) else []
    if not cards:
        raise ValueError("the list is empty")
    return cards


async def discover_model(cfg: ClientConfig) -> ServerModel | None:
    """The card of `cfg.model` (the first card when no model is given).

    Without --model a server that lists nothing is an error; with it, a server without
    /v1/models is fine (not every OpenAI-compatible server has one) and gives None. A --model the
    list does not hold, or a list refused with 401/403, is a ValueError before any request is sent."""
    try:
        cards = await list_models(cfg)
    except (httpx.HTTPError, ValueError, AttributeError) as exc:
        if isinstance(exc, httpx.HTTPStatusError) and exc.response.status_code in (401, 403):
            # every request would be refused the same way: say so now, not after the whole run
            raise ValueError(
                f"GET {cfg.base_url}/v1/models was refused ({_why(exc)}): check --api-key ($OPENAI_API_KEY) or --header"
            ) from None
        if cfg.model is not None:
            return None
        raise ValueError(f"no --model given and GET {cfg.base_url}/v1/models did not list one ({_why(exc)})") from None
    card = cards[0] if cfg.model is None else next((c for c in cards if c["id"] == cfg.model), None)
    if card is None:  # every request would fail with 404: refuse before the run
        served = ", ".join(repr(c["id"]) for c in cards[:MAX_NAMES_SHOWN])
        more = f" and {len(cards) - MAX_NAMES_SHOWN} more" if len(cards) > MAX_NAMES_SHOWN else ""
        raise ValueError(f"--model {cfg.model!r} is not served at {cfg.base_url}: GET /v1/models lists {served}{more}")
    max_len = card.get("max_model_len")
    root = card.get("root")
    return ServerModel(
        card["id"],
        root if isinstance(root, str) else None,
        max_len if isinstance(max_len, int) and not isinstance(max_len, bool) else None,
    )


def _why(exc: Exception) -> str:
    """One line for why the list failed. An error status is "HTTP 401 Unauthorized", then the server's
    message where the body is an OpenAI-style error: httpx's own text adds a second line (a link to MDN's
    page on the status) and repeats the URL the caller's sentence already names."""
    if not isinstance(exc, httpx.HTTPStatusError):
        return str(exc) or type(exc).__name__  # a timeout's text is empty
    response = exc.response
    status = f"HTTP {response.status_code} {response.reason_phrase}"
    message = json_error_message(response.text)
    if not message or message == response.reason_phrase:  # FastAPI's 404 says "Not Found" again
        return status
    return f"{status}: {' '.join(message.split())[:300]}"  # one line, however the server wrapped it


def local_tokenizer(*candidates: str | None) -> str | None:
    """The first candidate that is a folder on this machine holding tokenizer.json."""
    for path in candidates:
        if path and (Path(path) / "tokenizer.json").is_file():
            return path
    return None
