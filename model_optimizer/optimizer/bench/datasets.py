"""Read request files the user already has: JSONL traces and ShareGPT conversations.

A trace line is a JSON object with `timestamp` (seconds, or milliseconds with
`--trace-time-unit ms`), either `prompt` (text or a token-id list) or `prompt_len`
(alias `input_length`), and `output_len` (alias `output_length`).
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path

from model_optimizer.common.fileio import jsonl_values
from model_optimizer.optimizer.bench.lengths import MAX_TOKENS


@dataclass
class RawRequest:
    """One request as read from a file, before prompts are built."""

    prompt: str | list[int] | None
    prompt_len: int | None
    output_len: int | None
    timestamp: float | None = None
    reply: str | None = None
    """The recorded answer (ShareGPT), whose length becomes the output length."""


def load_trace(path: str, time_unit: str = "s") -> list[RawRequest]:
    """Parse a JSONL trace; timestamps become seconds from the first request, sorted by time (stable: ties
    keep the file's order), so `--num-requests N` takes the N earliest requests and request indices follow
    the order they are sent in."""
    scale = {"s": 1.0, "ms": 1e-3}[time_unit]
    rows: list[RawRequest] = []
    for number, item in jsonl_values(_open(path).splitlines(), path):
        if not isinstance(item, dict):
            raise ValueError(f"{path}:{number}: each line must be a JSON object")
        rows.append(_trace_row(item, f"{path}:{number}", scale))
    if not rows:
        raise ValueError(f"{path}: the trace holds no requests")
    rows.sort(key=lambda r: r.timestamp)  # type: ignore[arg-type,return-value]
    start = rows[0].timestamp
    for row in rows:
        row.timestamp = row.timestamp - start  # type: ignore[operator]
    return rows


def _trace_row(item: dict, where: str, scale: float) -> RawRequest:
    timestamp = item.get("timestamp")
    prompt = item.get("prompt")
    prompt_len = item.get("prompt_len", item.get("input_length"))
    output_len = item.get("output_len", item.get("output_length"))
    if not isinstance(timestamp, (int, float)) or isinstance(timestamp, bool) or not math.isfinite(timestamp):
        # NaN and Infinity parse as JSON numbers: an Infinity timestamp made a trace replay wait forever
        raise ValueError(f"{where}: needs a finite numeric 'timestamp', got {timestamp!r}")
    if prompt is None and not _positive_int(prompt_len):
        raise ValueError(f"{where}: needs 'prompt' or a positive integer 'prompt_len'")
    if prompt is not None and not (isinstance(prompt, str) or _id_list(prompt)):
        raise ValueError(f"{where}: 'prompt' must be text or a list of token ids")
    if not _positive_int(output_len):
        raise ValueError(f"{where}: needs a positive integer 'output_len'")
    for name, value in (("prompt_len", prompt_len if prompt is None else None), ("output_len", output_len)):
        if value is not None and value > MAX_TOKENS:  # its prompt would be built in memory before the run
            raise ValueError(f"{where}: '{name}' {value:,} is over {MAX_TOKENS:,} tokens")
    return RawRequest(prompt, prompt_len, output_len, float(timestamp) * scale)


def load_sharegpt(path: str) -> list[RawRequest]:
    """Take the first user turn and the reply after it from each ShareGPT conversation."""
    try:
        data = json.loads(_open(path))
    except json.JSONDecodeError as exc:
        raise ValueError(f"{path}: not a JSON file ({exc.msg}); ShareGPT files are one JSON list") from None
    if not isinstance(data, list):
        raise ValueError(f"{path}: a ShareGPT file is a JSON list of {{'conversations': [...]}} objects")
    rows = []
    for item in data:
        turns = item.get("conversations") if isinstance(item, dict) else None
        pair = _first_exchange(turns) if isinstance(turns, list) else None
        if pair:
            rows.append(RawRequest(pair[0], None, None, reply=pair[1]))
    if not rows:
        raise ValueError(f"{path}: no conversation has a user turn followed by a reply")
    return rows


def _first_exchange(turns: list) -> tuple[str, str] | None:
    for ask, answer in zip(turns, turns[1:]):
        if not (isinstance(ask, dict) and isinstance(answer, dict)):
            continue
        if ask.get("from") in ("human", "user") and answer.get("from") in ("gpt", "assistant", "chatgpt"):
            prompt, reply = ask.get("value"), answer.get("value")
            if isinstance(prompt, str) and isinstance(reply, str) and prompt and reply:
                return prompt, reply
    return None


def _open(path: str) -> str:
    file = Path(path)
    if file.is_dir():
        raise ValueError(f"dataset file {path} is a folder; give a file")
    if not file.is_file():
        raise ValueError(f"dataset file not found: {path}")
    try:
        return file.read_text(encoding="utf-8")
    except UnicodeDecodeError as exc:  # the bare message named neither the file nor the problem's place
        raise ValueError(f"{path} is not UTF-8 text ({exc.reason} at byte {exc.start})") from None


def _positive_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value > 0


def _id_list(value: object) -> bool:
    return isinstance(value, list) and bool(value) and all(_positive_int(v) or v == 0 for v in value)
