"""A Responses API request's `instructions` and `input` as the chat messages they stand for.

`input` is a text (one user message) or items: messages (text parts only), the model's earlier function
and custom tool calls, joined to the assistant message before them as chat writes a turn's text and
calls, their outputs (tool messages), and reasoning items, whose text becomes the next assistant turn's
`reasoning`. Errors are APIError 400s naming the item (`input[2].role`).
"""

from __future__ import annotations

from typing import Any

from model_optimizer.runtime.engine.chat_content import TEXT_PARTS
from model_optimizer.runtime.server.errors import APIError

ROLES = ("user", "assistant", "system", "developer")
"""The roles a message item may have."""


def input_messages(instructions: str | None, items: str | list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The chat messages of a request's instructions (a system message) and input; APIError (400) for an
    input that has none, or an item that does not translate."""
    messages: list[dict[str, Any]] = []
    if instructions:
        messages.append({"role": "system", "content": instructions})
    if isinstance(items, str):
        messages.append({"role": "user", "content": items})
    else:
        thinking: list[str] = []  # reasoning items waiting for the assistant turn they belong to
        for i, item in enumerate(items):
            _add_item(messages, item, f"input[{i}]", thinking)
        _check_outputs_answer_calls(messages)
    if not messages:
        raise APIError(400, "input is empty: give a text or at least one message", "input")
    return messages


def _add_item(messages: list[dict[str, Any]], item: dict[str, Any], where: str, thinking: list[str]) -> None:
    """One input item as chat messages: a message; a function call, joined to the assistant message just
    before it (chat writes a turn's text and calls as one message); a function call's output (a tool
    message); a reasoning item, whose text becomes the next assistant turn's `reasoning` (templates that
    show past thinking, as Qwen3's within a tool loop, see it as they would on chat)."""
    kind = item.get("type", "message")
    if kind == "reasoning":
        text = _reasoning_text(item, where)
        if text:  # an encrypted-only item has none to show
            thinking.append(text)
        return
    if kind == "message":
        role = item.get("role")
        if role not in ROLES:
            raise APIError(400, f"{where}.role must be one of {', '.join(ROLES)}, got {role!r}", f"{where}.role")
        messages.append({"role": role, "content": _text(item.get("content"), f"{where}.content")})
    elif kind == "function_call":
        function = {"name": _string(item, "name", where), "arguments": _string(item, "arguments", where)}
        _add_call(messages, {"id": _string(item, "call_id", where), "type": "function", "function": function}, thinking)
    elif kind == "custom_tool_call":
        custom = {"name": _string(item, "name", where), "input": _string(item, "input", where)}
        _add_call(messages, {"id": _string(item, "call_id", where), "type": "custom", "custom": custom}, thinking)
    elif kind in ("function_call_output", "custom_tool_call_output"):
        output = item.get("output")
        if not isinstance(output, str):
            output = _text(output, f"{where}.output")
        messages.append({"role": "tool", "tool_call_id": _string(item, "call_id", where), "content": output})
    else:
        raise APIError(
            400,
            f"{where}: input items of type {kind!r} are not supported (message, function_call, "
            "function_call_output, custom_tool_call, custom_tool_call_output and reasoning are)",
            f"{where}.type",
        )
    if messages[-1]["role"] == "assistant" and thinking:
        messages[-1]["reasoning"] = "\n".join(thinking)
    thinking.clear()  # thinking no assistant turn followed (a response cut while thinking) is dropped


def _add_call(messages: list[dict[str, Any]], call: dict[str, Any], thinking: list[str]) -> None:
    """A call joined to the assistant message just before it (chat writes a turn's text and calls as one
    message), else in an assistant message of its own."""
    last = messages[-1] if messages else None
    if last is not None and last["role"] == "assistant" and not thinking:
        last.setdefault("tool_calls", []).append(call)
    else:
        messages.append({"role": "assistant", "content": None, "tool_calls": [call]})


def _check_outputs_answer_calls(messages: list[dict[str, Any]]) -> None:
    """APIError (400, as OpenAI's) for a function call's output whose call_id no earlier function_call has."""
    called: set[str] = set()
    for message in messages:
        called.update(call["id"] for call in message.get("tool_calls", ()))
        if message["role"] == "tool" and message["tool_call_id"] not in called:
            call_id = message["tool_call_id"]
            raise APIError(400, f"no function_call before the function_call_output with call_id {call_id!r}", "input")


def _reasoning_text(item: dict[str, Any], where: str) -> str:
    """A reasoning item's text: its reasoning_text parts, else its summary's texts."""
    for key, part_type in (("content", "reasoning_text"), ("summary", "summary_text")):
        parts = item.get(key)
        if isinstance(parts, list) and parts:
            texts = [p.get("text") for p in parts if isinstance(p, dict) and p.get("type") == part_type]
            if not all(isinstance(t, str) for t in texts):
                raise APIError(400, f"{where}.{key}: each part needs its text", f"{where}.{key}")
            if texts:
                return "\n".join(texts)
    return ""


def _text(content: Any, where: str) -> str:
    """A message's content as text: a string, or text parts joined by newlines (as chat joins them)."""
    if isinstance(content, str):
        return content
    if not isinstance(content, list) or not content:
        raise APIError(400, f"{where} must be a string or a list of text parts", where)
    texts = []
    for i, part in enumerate(content):
        kind = part.get("type") if isinstance(part, dict) else None
        key = TEXT_PARTS.get(kind) if isinstance(kind, str) else None
        if key is None or not isinstance(part.get(key), str):
            kind = part.get("type") if isinstance(part, dict) else type(part).__name__
            raise APIError(400, f"{where}[{i}]: only text parts are supported here, got {kind!r}", f"{where}[{i}]")
        texts.append(part[key])
    return "\n".join(texts)


def _string(item: dict[str, Any], key: str, where: str) -> str:
    value = item.get(key)
    if not isinstance(value, str):
        raise APIError(400, f"{where}.{key} must be a string", f"{where}.{key}")
    return value
