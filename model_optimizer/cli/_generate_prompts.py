"""`mopt generate`'s prompts as the user gave them: --prompt values and JSONL lines, each checked for its
shape before the model loads, and each line's SamplingParams (`line_params`), so that a bad line fails in a
second and names its FILE:LINE.

(The leading underscore keeps this module out of `mopt`'s subcommands: cli/main.py registers every other
module of this package as one.)
"""

from __future__ import annotations

import difflib
from collections.abc import Iterator
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

from model_optimizer.common.fileio import jsonl_values, read_input
from model_optimizer.common.text import not_utf8_at
from model_optimizer.runtime.sampling_params import SamplingParams, logit_bias_from_json

PROMPT_KEYS = ("prompt", "prompt_token_ids", "messages")
CHAT_KEYS = ("tools", "chat_template_kwargs", "add_generation_prompt", "continue_final_message")
"""A "messages" line's rendering options, as LLM.chat and a chat completion request take them."""
ENGINE_FIELDS = ("output_kind", "min_tokens_barred")
"""SamplingParams fields the engine sets (LLM.generate asks for final outputs; min_tokens bars EOS): not line keys."""
LINE_KEYS = PROMPT_KEYS + CHAT_KEYS + tuple(f.name for f in fields(SamplingParams) if f.name not in ENGINE_FIELDS)
STDIN = "-"
"""--prompts-file's name for stdin, as --output's for stdout."""


@dataclass
class PromptLine:
    """One prompt as the user gave it, where it came from (for errors) and its own sampling fields."""

    source: str
    """'FILE:LINE' or '--prompt #k'."""
    prompt: str | list[int] | None = None
    messages: list[dict] | None = None
    chat: dict[str, Any] = field(default_factory=dict)
    """The line's CHAT_KEYS: keyword arguments of chat_text."""
    sampling: dict[str, Any] = field(default_factory=dict)


def read_prompt_lines(prompts: list[str], prompts_file: str | Path | None, chat: bool = False) -> list[PromptLine]:
    """--prompt values (with `chat`, each a user message) and JSONL lines, each checked for its shape
    (ValueError naming FILE:LINE, <stdin>:LINE for `-`)."""
    lines = [PromptLine(f"--prompt #{k}", _text(p, "--prompt")) for k, p in enumerate(prompts, start=1)]
    if chat:
        for line in lines:
            line.prompt, line.messages = None, [{"role": "user", "content": line.prompt}]
    if prompts_file:
        path, name = (Path("/dev/stdin"), "<stdin>") if prompts_file == STDIN else (Path(prompts_file), prompts_file)
        for number, row in jsonl_values(_utf8_lines(path, name), name):
            source = f"{name}:{number}"
            try:
                lines.append(_parse_line(row, source))
            except ValueError as exc:
                raise ValueError(f"{source}: {exc}") from None
    if not lines and prompts_file:
        raise ValueError(f"{name} holds no prompts (no JSON lines)")
    if not lines:
        raise ValueError("no prompts: give --prompt TEXT or --prompts-file FILE")
    return lines


def _utf8_lines(path: Path, name: str | Path) -> Iterator[str]:
    """The file's lines as text; a line that is not UTF-8 is an error naming it (`name`). (Split as bytes: a
    U+2028 inside a JSON string is not a line break.)"""
    for number, raw in enumerate(read_input(path).splitlines(), start=1):
        try:
            yield raw.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise ValueError(f"{name}:{number}: not UTF-8 text ({exc.reason} at byte {exc.start})") from None


def _parse_line(row: Any, source: str) -> PromptLine:
    """One JSONL value as a PromptLine: its prompt key, its chat options (with "messages" only) and the
    SamplingParams fields it sets."""
    given = _prompt_key(row)
    sampling = {k: v for k, v in row.items() if k not in PROMPT_KEYS + CHAT_KEYS}
    chat = {k: v for k, v in row.items() if k in CHAT_KEYS}
    if chat and "messages" not in row:
        raise ValueError(f"{', '.join(map(repr, chat))} go(es) with 'messages', not with {given!r}")
    if "prompt" in row:
        return PromptLine(source, prompt=_text(row["prompt"], "prompt"), sampling=sampling)
    if "prompt_token_ids" in row:
        ids = row["prompt_token_ids"]
        if not isinstance(ids, list) or not ids or not all(isinstance(t, int) and not isinstance(t, bool) for t in ids):
            raise ValueError(f"prompt_token_ids must be a non-empty list of integers, got {clip(ids)}")
        return PromptLine(source, prompt=ids, sampling=sampling)
    return PromptLine(source, messages=_messages(row["messages"]), chat=_chat_options(chat), sampling=sampling)


def line_params(line: PromptLine, base: dict[str, Any], flags: dict[str, Any]) -> SamplingParams:
    """A line's SamplingParams: its own fields over the sampling `flags` over `base` (the model's defaults and
    the line's seed). ValueError naming the flags when they are refused without the line (a line may set what
    makes them valid: its own max_tokens over --min-tokens), else naming the line."""
    try:
        params = SamplingParams(**{**base, **flags, **_json_sampling(line.sampling)})
        if params.structured_outputs is not None:  # a bad regex or grammar: refused now, not an empty "error" output
            from model_optimizer.runtime.structured.grammar import check_offline

            check_offline(params.structured_outputs)
        return params
    except ValueError as exc:
        raise ValueError(_flags_error(base, flags) or f"{line.source}: {exc}") from None


def _flags_error(base: dict[str, Any], flags: dict[str, Any]) -> str | None:
    """The error naming the sampling flags given when SamplingParams refuses them over `base`, else None."""
    try:
        SamplingParams(**{**base, **flags})
    except ValueError as exc:
        named = ", ".join("--" + name.replace("_", "-") for name in sorted(flags))
        return f"the sampling flags ({named}): {exc}"
    return None


def _json_sampling(sampling: dict[str, Any]) -> dict[str, Any]:
    """A line's sampling fields with logit_bias's keys as token ids (JSON object keys are strings)."""
    bias = sampling.get("logit_bias")
    return {**sampling, "logit_bias": logit_bias_from_json(bias)} if isinstance(bias, dict) else sampling


def _prompt_key(row: Any) -> str:
    """The one PROMPT_KEYS key of a JSONL value; ValueError for a value that is no object, an unknown key
    (with the closest known one) or not exactly one prompt key."""
    if not isinstance(row, dict):
        raise ValueError(f"expected a JSON object with one of {_names(PROMPT_KEYS)}, got {type(row).__name__}")
    for key in row:
        if key not in LINE_KEYS:
            close = difflib.get_close_matches(key, LINE_KEYS, n=1)
            hint = f"did you mean {close[0]!r}?" if close else f"known keys: {', '.join(LINE_KEYS)}"
            raise ValueError(f"unknown key {key!r} ({hint})")
    given = [k for k in PROMPT_KEYS if k in row]
    if len(given) != 1:
        what = "give only one of" if given else "give one of"
        raise ValueError(f"{what} {_names(PROMPT_KEYS)}")
    return given[0]


def _text(value: Any, name: str) -> str:
    if not isinstance(value, str) or not value:
        raise ValueError(f"{name} must be a non-empty string, got {clip(value)}")
    _check_unicode(value, name)
    return value


def _check_unicode(value: str, name: str) -> None:
    """ValueError unless `value` is valid Unicode text, which the tokenizer needs (it raises a TypeError
    otherwise). A JSON \\ud800 escape gives a lone surrogate; a command-line byte that is not UTF-8
    reaches Python as one too (U+DC80..U+DCFF, the surrogateescape of that byte)."""
    at = not_utf8_at(value)
    if at is None:
        return
    char = value[at]
    if name.startswith("--") and "\udc80" <= char <= "\udcff":
        reason = f"not valid UTF-8 text (byte 0x{ord(char) - 0xDC00:02x} at character {at})"
    else:
        reason = f"not valid Unicode text (a lone surrogate {char!r} at character {at})"
    raise ValueError(f"{name} is {reason}")


def _messages(messages: Any) -> list[dict]:
    """The shape every message needs (an object with a string role); the rest (content as text, null or a
    list of parts, tool_calls, tool_call_id, ...) is checked as LLM.chat and the server check it, when
    the conversation is rendered."""
    if not isinstance(messages, list) or not messages:
        raise ValueError(
            f'messages must be a non-empty list of {{"role": ..., "content": ...}} objects, got {clip(messages)}'
        )
    for k, message in enumerate(messages):
        if not (isinstance(message, dict) and isinstance(message.get("role"), str)):
            raise ValueError(f"messages[{k}] must be an object with a string 'role', got {clip(message)}")
        _check_unicode_within(message, f"messages[{k}]")
    return messages


def _chat_options(chat: dict[str, Any]) -> dict[str, Any]:
    """A line's CHAT_KEYS, checked for their JSON types, as chat_text's keyword arguments."""
    for key, kind in (("tools", list), ("chat_template_kwargs", dict)):
        if key in chat and not isinstance(chat[key], kind):
            raise ValueError(f"{key} must be a JSON {'list' if kind is list else 'object'}, got {clip(chat[key])}")
    for key in ("add_generation_prompt", "continue_final_message"):
        if key in chat and not isinstance(chat[key], bool):
            raise ValueError(f"{key} must be true or false, got {clip(chat[key])}")
    if chat.get("continue_final_message") and "add_generation_prompt" not in chat:
        chat = {**chat, "add_generation_prompt": False}  # continuing the last message opens no new turn
    _check_unicode_within(chat, "the chat options")
    return {("template_kwargs" if k == "chat_template_kwargs" else k): v for k, v in chat.items()}


def _check_unicode_within(value: Any, name: str) -> None:
    """_check_unicode on every string within `value` (JSON: objects, lists, strings), named by its path."""
    if isinstance(value, str):
        _check_unicode(value, name)
    elif isinstance(value, dict):
        for key, item in value.items():
            _check_unicode_within(item, f"{name}.{key}")
    elif isinstance(value, list):
        for index, item in enumerate(value):
            _check_unicode_within(item, f"{name}[{index}]")


def _names(keys: tuple[str, ...]) -> str:
    return ", ".join(repr(k) for k in keys[:-1]) + f" or {keys[-1]!r}"


def clip(value: Any, limit: int = 60) -> str:
    """repr(value), shortened to `limit` characters for messages and the text view."""
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."
