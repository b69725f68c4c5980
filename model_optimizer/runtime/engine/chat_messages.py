"""Chat messages as chat templates read them, whoever sends them (LLM.chat, `mopt generate`, the server).

Two things every way in needs before a message is shaped (chat_content.py) and rendered:
- plain dicts: a pydantic message (the `openai` package's ChatCompletionMessage, appended to a history as
  it came back) is dumped, as transformers' apply_chat_template dumps it, so content shaping and
  continue_final_message, which read dicts, see it as they see a dict;
- a tool call's arguments as an object: OpenAI's API carries them as JSON text, and a template that
  writes them with `tojson` (Llama 3.1's) would print that text as one quoted string, showing the model
  its own call double-encoded. vLLM parses them for the template, as transformers' templates expect.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any


def template_messages(messages: Sequence[Any]) -> list[Any]:
    """Copies of `messages` as plain dicts, keys whose value is None dropped (as transformers drops them:
    templates print "None" for a None but handle a missing key) except `content` (chat_content shapes a None
    to no text, as vLLM does), each tool call's arguments an object (call_arguments). What is no message is
    left as it is, for the template's rendering to refuse, as transformers refuses it."""
    return [_template_message(message) for message in messages]


def call_arguments(arguments: Any) -> Any:
    """A tool call's arguments as the template gets them: JSON text as the object it encodes; None or blank
    text (a stream cut before them) as {}, as vLLM gives them; text that is not JSON (or nests deeper than
    Python's parser goes) as the text, for the template to print as it came; an object as it is."""
    if arguments is None or (isinstance(arguments, str) and not arguments.strip()):
        return {}
    if not isinstance(arguments, str):
        return arguments
    try:
        return json.loads(arguments)
    except (ValueError, RecursionError):
        return arguments


def _template_message(message: Any) -> Any:
    message = _plain(message)
    if not isinstance(message, dict):
        return message
    item = {key: value for key, value in message.items() if value is not None or key == "content"}
    calls = item.get("tool_calls")
    for call in calls if isinstance(calls, list) else ():
        function = call.get("function") if isinstance(call, dict) else None
        if isinstance(function, dict) and "arguments" in function:  # a copy (_plain): the caller's stays
            function["arguments"] = call_arguments(function["arguments"])
    return item


def _plain(value: Any) -> Any:
    """`value` with every pydantic object in it dumped and every mapping a new dict (lists and tuples copied),
    so the caller's messages are never changed."""
    if callable(getattr(value, "model_dump", None)):
        return _plain(value.model_dump())
    if isinstance(value, Mapping):
        return {key: _plain(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_plain(item) for item in value]
    if isinstance(value, tuple):
        return tuple(_plain(item) for item in value)
    return value
