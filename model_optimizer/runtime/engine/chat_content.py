"""How a message's content reaches a chat template: one text, or OpenAI's list of parts (vLLM's
`--chat-template-content-format`).

- `string`: a message's text parts are joined with newlines into one text, which most templates print.
- `openai`: every message's content is a list of `{"type": "text", "text": ...}` parts (a text becomes
  one part, no content none), for templates that loop over a message's parts. A tool message's text
  parts stay one text there too: templates print a tool's result as text.
- `auto`: `openai` when the template loops over a message's content (found in its syntax tree, as vLLM
  does), else `string`.

Only text parts exist here: the server refuses other kinds before a message gets this far.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Mapping
from typing import Any, Literal

logger = logging.getLogger(__name__)

CONTENT_FORMATS = ("auto", "string", "openai")


def check_format(content_format: object) -> None:
    """ValueError naming the choices for a content format that is none of CONTENT_FORMATS."""
    if content_format not in CONTENT_FORMATS:
        choices = ", ".join(CONTENT_FORMATS)
        raise ValueError(f"chat_template_content_format must be one of {choices}, got {content_format!r}")


def resolved(content_format: str, template: str) -> Literal["string", "openai"]:
    """`content_format` with `auto` read from `template` (the one rendered: of a tokenizer's named templates,
    input_processor.chat_template_for picks it first); ValueError for a name not in CONTENT_FORMATS."""
    check_format(content_format)
    if content_format == "auto":
        return "openai" if loops_over_content(template) else "string"
    return content_format  # type: ignore[return-value]


def shaped(messages: list[Mapping], content_format: Literal["string", "openai"]) -> list:
    """Copies of `messages` whose content is in `content_format` (resolved), the rest of each unchanged.
    A content that is neither text, a list of text parts nor None is left as it is, for the template."""
    return [_shaped(message, content_format) for message in messages]


def _shaped(message: Any, content_format: str) -> Any:
    if not isinstance(message, Mapping) or "content" not in message:
        return message  # not a message, or one without content: as given, for the template
    item = dict(message)
    texts = _texts(item.get("content"))
    if texts is not None:
        openai = content_format == "openai" and item.get("role") != "tool"
        item["content"] = [{"type": "text", "text": text} for text in texts] if openai else "\n".join(texts)
    return item


TEXT_PARTS = {"text": "text", "input_text": "text", "output_text": "text", "refusal": "refusal"}
"""Content part types that are text, as vLLM reads them, each with the key of its text: an assistant's
`refusal` (under "refusal", as OpenAI returns it), the Responses API's `input_text` / `output_text`."""


def _texts(content: Any) -> list[str] | None:
    """The texts of a content (a text, text parts, or None: no text), or None when it is something else.
    ValueError for a part of a type that is no text (an image, audio, a file): this engine reads text only,
    and a template that loops over parts would drop it without a word."""
    if content is None:
        return []
    if isinstance(content, str):
        return [content]
    if not isinstance(content, (list, tuple)):
        return None
    texts = []
    for part in content:
        if isinstance(part, str):
            texts.append(part)
            continue
        kind = (part.get("type") or "text") if isinstance(part, Mapping) else None
        if isinstance(kind, str) and kind not in TEXT_PARTS:
            raise ValueError(f"only text content parts are supported ({', '.join(TEXT_PARTS)}), got {kind!r}")
        text = part.get(TEXT_PARTS[kind]) if isinstance(kind, str) else None
        if isinstance(kind, str) and not isinstance(text, str):  # {"type": "text"}: its repr would be the prompt
            raise ValueError(f"a {kind!r} content part needs a string {TEXT_PARTS[kind]!r}, got {part!r}")
        if not isinstance(text, str):
            return None  # not a part this module can read: as given, for the template
        texts.append(text)
    return texts


@functools.lru_cache(maxsize=16)
def loops_over_content(template: str) -> bool:
    """Whether `template` has a `for` loop over a message's content (`message['content']`, `message.content`,
    through filters and slices), a message being an item of `messages` or of a list taken from it, by loop
    or assignment (an item taken by index, `messages[0]`, is not followed, as vLLM does not). A template
    that cannot be read: False (the text, as most templates take it)."""
    from jinja2 import nodes

    try:
        tree = _environment(template).parse(template)
    except Exception as exc:  # noqa: BLE001 - a syntax error, or a tree too deep: read as text, as vLLM does
        logger.debug("chat template not parsed for its content format (%s): message content as text", exc)
        return False
    lists, items = {"messages"}, set()
    grew = True
    while grew:  # names bound from messages, until no new one appears
        before = len(lists) + len(items)
        for node in tree.find_all(nodes.Assign):
            if isinstance(node.target, nodes.Name):
                if _names(node.node, lists, nodes):
                    lists.add(node.target.name)
                elif _names(node.node, items, nodes):
                    items.add(node.target.name)
        for node in tree.find_all(nodes.For):
            if isinstance(node.target, nodes.Name) and _names(node.iter, lists, nodes):
                items.add(node.target.name)
        grew = len(lists) + len(items) > before
    return any(_content_of(node.iter, items, nodes) for node in tree.find_all(nodes.For))


def _environment(template: str) -> Any:
    """transformers' own Jinja environment (its `{% generation %}` tag included) where this version has it
    where it used to, else a plain one with the loop controls chat templates use."""
    import jinja2

    try:
        from transformers.utils.chat_template_utils import _compile_jinja_template

        return _compile_jinja_template(template).environment
    except Exception:  # noqa: BLE001 - a private helper that moved or failed: the plain environment decides
        return jinja2.Environment(extensions=["jinja2.ext.loopcontrols"])


def _bare(node: Any, nodes: Any) -> Any:
    """`node` without the filters, tests and slices around it."""
    while True:
        if isinstance(node, (nodes.Filter, nodes.Test)) and node.node is not None:
            node = node.node
        elif isinstance(node, nodes.Getitem) and isinstance(node.arg, nodes.Slice):
            node = node.node
        else:
            return node


def _names(node: Any, names: set[str], nodes: Any) -> bool:
    node = _bare(node, nodes)
    return isinstance(node, nodes.Name) and node.name in names


def _content_of(node: Any, items: set[str], nodes: Any) -> bool:
    """`message['content']` or `message.content` of a name for a message."""
    node = _bare(node, nodes)
    if isinstance(node, nodes.Getattr):
        key = node.attr
    elif isinstance(node, nodes.Getitem) and isinstance(node.arg, nodes.Const):
        key = node.arg.value
    else:
        return False
    return key == "content" and _names(node.node, items, nodes)
