"""Chat templates rendered with jinja2 alone, the way transformers' `apply_chat_template` renders them.

The fast tokenizer (fast_tokenizer.py) exists so that serving a model never imports transformers
(seconds of start-up); its chat templates must still render byte for byte as transformers renders
them, since the prompt the model sees is the template's text. What matters for that:
- a sandboxed environment with `trim_blocks` and `lstrip_blocks` and the loop-control extension;
- `tojson` that keeps non-ASCII and does not HTML-escape (jinja's own escapes `<`, `>`, `&`, `'`);
- `raise_exception(message)`, `strftime_now(format)` as globals; a `{% generation %}` block is
  accepted and renders its body (the tag only matters for assistant masks, which we never ask for);
- messages as plain dicts, keys whose value is None dropped; reasoning under any of its three names
  also visible as `reasoning_content` and `thinking`;
- the named special tokens (bos_token, eos_token, ...) as variables, overridden by caller kwargs.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Mapping
from datetime import datetime
from typing import Any

REASONING_KEYS = ("reasoning_content", "thinking", "reasoning")
"""Names a message's reasoning arrives under; templates read the first (gpt-oss ones the second)."""


def render_chat(
    template: str,
    messages: list[Any],
    variables: Mapping[str, Any],
    add_generation_prompt: bool = False,
    tools: list[dict] | None = None,
    documents: list[dict] | None = None,
) -> str:
    """The conversation rendered as text; a ValueError for messages or tools of the wrong shape."""
    if not messages:
        raise ValueError("Cannot apply chat template to an empty conversation. Provide at least one message.")
    chat = [_with_reasoning_aliases(_message_dict(m)) for m in messages]
    if tools is not None and not all(isinstance(t, dict) for t in tools):
        raise ValueError("tools must be JSON schemas (dicts); callables need transformers")
    if documents is not None and not all(isinstance(d, dict) for d in documents):
        raise TypeError("Documents should be a list of dicts with 'title' and 'text' keys!")
    return _compiled(template).render(
        messages=chat,
        tools=_plain(tools),
        documents=_plain(documents),
        add_generation_prompt=add_generation_prompt,
        **_plain(dict(variables)),
    )


def _message_dict(message: Any) -> dict:
    if hasattr(message, "model_dump"):
        message = message.model_dump()
    if not isinstance(message, Mapping):
        raise TypeError(f"Chat messages should be dicts, dataclasses or pydantic models, but got {message!r}.")
    # None values dropped: many templates print "None" for content=None but handle a missing key
    return {key: _plain(value) for key, value in message.items() if value is not None}


def _with_reasoning_aliases(message: dict) -> dict:
    reasoning = next((message[key] for key in REASONING_KEYS if message.get(key) is not None), None)
    if reasoning is None:
        return message
    return {"thinking": reasoning, **message, "reasoning_content": reasoning}


def _plain(value: Any) -> Any:
    """JSON-shaped copies only: the sandbox then sees no object with methods of its own."""
    if value is None or type(value) in (str, int, float, bool):
        return value
    if isinstance(value, str):
        return str.__str__(value)
    if isinstance(value, int):
        return int.__int__(value)
    if isinstance(value, float):
        return float.__float__(value)
    if isinstance(value, Mapping):
        return {_plain(k): _plain(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_plain(v) for v in value]
    if isinstance(value, tuple):
        return tuple(_plain(v) for v in value)
    if hasattr(value, "model_dump"):
        return _plain(value.model_dump())
    return f"<{type(value).__name__}>"


@functools.lru_cache(maxsize=16)
def _compiled(template: str) -> Any:
    """Compile once per template text (the server renders the same one on every chat request)."""
    import jinja2
    from jinja2.ext import Extension, loopcontrols
    from jinja2.sandbox import ImmutableSandboxedEnvironment

    class GenerationBlock(Extension):
        """`{% generation %}...{% endgeneration %}` marks assistant text for training masks; here it just renders."""

        tags = {"generation"}

        def parse(self, parser: Any) -> Any:
            lineno = next(parser.stream).lineno
            body = parser.parse_statements(("name:endgeneration",), drop_needle=True)
            return jinja2.nodes.CallBlock(self.call_method("_render"), [], [], body).set_lineno(lineno)

        def _render(self, caller: Any) -> str:
            return caller()

    def raise_exception(message: str) -> None:
        raise jinja2.exceptions.TemplateError(message)

    def tojson(value: Any, ensure_ascii: bool = False, indent: Any = None, separators: Any = None, sort_keys=False):
        return json.dumps(value, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)

    env = ImmutableSandboxedEnvironment(
        trim_blocks=True, lstrip_blocks=True, extensions=[GenerationBlock, loopcontrols]
    )
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = lambda fmt: datetime.now().strftime(fmt)
    return env.from_string(template)
