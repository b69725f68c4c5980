"""What every request sends: its body for the endpoint (`request_body`: the prompt, lengths, sampling
flags, the response format), and what the user adds, --header KEY=VALUE and --extra-body JSON, as
`vllm bench serve` (`--header`, `--extra-body`) and genai-perf (`--header`, `--extra-inputs`) take them.

Both are checked when the ClientConfig is built, so a typo fails before any request (exit 2); both are
saved in the run's config, header values that look like credentials masked as the API key is.
Each function's `cfg` is a client.ClientConfig, not imported here: client.py imports this module.
"""

from __future__ import annotations

import functools
import json
import re
from pathlib import Path

from model_optimizer.optimizer.bench.workloads import BenchRequest

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


def request_body(cfg, req: BenchRequest) -> bytes:
    """The JSON body of `req` for the configured endpoint, with --extra-body merged over it."""
    return json.dumps(_body(cfg, req) | (extra_body_of(cfg) or {})).encode()


def _body(cfg, req: BenchRequest) -> dict:
    payload: dict = {"model": cfg.model}
    if cfg.endpoint == "embeddings":
        payload["input"] = req.prompt
        return payload
    if cfg.endpoint == "responses":
        return _responses_body(cfg, req, payload)
    if cfg.endpoint == "chat":
        payload["messages"] = [{"role": "user", "content": req.prompt}]
    else:
        payload["prompt"] = req.prompt
    payload.update(max_tokens=req.output_len, stream=True, stream_options={"include_usage": True})
    if cfg.ignore_eos:
        payload["ignore_eos"] = True
    if cfg.temperature is not None:
        payload["temperature"] = cfg.temperature
    if cfg.return_token_ids:
        payload["return_token_ids"] = True
    if cfg.logprobs is not None:  # chat asks with a flag plus top_logprobs; completions with the count
        payload.update(
            {"logprobs": True, "top_logprobs": cfg.logprobs} if cfg.endpoint == "chat" else {"logprobs": cfg.logprobs}
        )
    response_format = response_format_of(cfg)
    if response_format is not None:  # chat's field; vLLM and mopt serve take it on completions too
        payload["response_format"] = response_format
    return payload


def _responses_body(cfg, req: BenchRequest, payload: dict) -> dict:
    """A Responses API request: the prompt as input, max_output_tokens, the schema as text.format (flat)."""
    payload.update(input=req.prompt, max_output_tokens=req.output_len, stream=True)
    if cfg.ignore_eos:
        payload["ignore_eos"] = True
    if cfg.temperature is not None:
        payload["temperature"] = cfg.temperature
    if cfg.logprobs is not None:  # OpenAI and vLLM return them only when `include` asks
        payload.update(top_logprobs=cfg.logprobs, include=["message.output_text.logprobs"])
    response_format = response_format_of(cfg)
    if response_format is not None:
        spec = response_format.get("json_schema") or {}
        payload["text"] = {"format": {"type": response_format["type"], **spec}}
    return payload


def response_format_of(cfg) -> dict | None:
    """The response_format every request sends (from json_schema or response_format), or None."""
    return _read_response_format(cfg.json_schema, cfg.response_format)


@functools.lru_cache(maxsize=8)
def _read_response_format(schema_file: str | None, format_file: str | None) -> dict | None:
    path = schema_file or format_file
    if not path:
        return None
    try:
        value = json.loads(Path(path).read_text())
    except OSError as exc:
        raise ValueError(f"cannot read {path}: {exc.strerror or exc}") from None
    except ValueError as exc:
        raise ValueError(f"{path} is not JSON: {exc}") from None
    if schema_file:
        if not isinstance(value, dict):
            raise ValueError(f"{path}: a JSON schema must be an object")
        name = re.sub(r"[^A-Za-z0-9_-]", "_", Path(path).stem)[:64] or "schema"  # OpenAI's rule for the name
        return {"type": "json_schema", "json_schema": {"name": name, "schema": value}}
    if not isinstance(value, dict) or not isinstance(value.get("type"), str):
        raise ValueError(f'{path}: a response_format is an object with a "type" (json_object, json_schema ...)')
    return value
