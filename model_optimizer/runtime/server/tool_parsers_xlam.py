"""`xlam` (Salesforce xLAM): the calls are a JSON list of {"name", "arguments"} objects.

The list is the whole output, or sits inside a ```json fence, after `[TOOL_CALLS]`, inside `<tool_call>` tags,
or after a `</think>`; only the first such list counts. The text around it is content: what comes before
it, then what follows its closing fence or tag. A list that holds no call (`[1, 2]`, a fenced list of
numbers) is content too, known once the output has ended.
"""

from __future__ import annotations

import re

from model_optimizer.runtime.server.tool_parsers import (
    ToolParser,
    ToolView,
    _held_back,
    _separated_calls,
    skip_ws,
    value_end,
)

_START = re.compile(
    r"(?P<fence>```(?:json)?\s*)\[|(?P<mistral>\[TOOL_CALLS\]\s*)\[|(?P<tag><tool_call>\s*)\[|(?P<think></think>)\s*\["
)
"""Where a list of calls begins after some text; the list's `[` ends the match."""
_ARRIVING = re.compile(r"(?:```(?:j(?:s(?:on?)?)?)?|\[TOOL_CALLS\]|<tool_call>|</think>)\s*$")
"""A marker at the end of the text whose list may follow."""
_MARKERS = ("```", "[TOOL_CALLS]", "<tool_call>", "</think>")
_CLOSERS = {"fence": "```", "tag": "</tool_call>"}


class XlamParser(ToolParser):
    name = "xlam"

    def view(self, text: str, final: bool) -> ToolView:
        found = _calls_list(text)
        if found is None:
            return ToolView(text if final else _arriving_content(text))
        at, head_end, closer = found
        calls = _separated_calls(text, skip_ws(text, at + 1), ",")
        named = any(c.name for c in calls)
        if final and not named:
            return ToolView(text)  # no call in the list: the model's answer
        tail = _tail(text, at, closer, final) if named else ""
        return ToolView(text[:head_end].rstrip() + tail, calls)


def _calls_list(text: str) -> tuple[int, int, str | None] | None:
    """(where the first list of objects opens, where the content before it ends, its closing fence or tag)
    of the text, or None. A list whose first element has not arrived counts; one of other values does not."""
    start = skip_ws(text, 0)
    candidates = [(start, 0, None)] if text.startswith("[", start) else []
    for found in _START.finditer(text):
        kind = found.lastgroup or ""
        head_end = found.end("think") if kind == "think" else found.start()  # the tag stays with the thinking
        candidates.append((found.end() - 1, head_end, _CLOSERS.get(kind)))
    for at, head_end, closer in candidates:
        first = skip_ws(text, at + 1)
        if first >= len(text) or text[first] == "{":
            return at, head_end, closer
    return None


def _arriving_content(text: str) -> str:
    """Content of a text without a list of calls yet: all but a marker that may be arriving, and trailing
    whitespace (a list could follow it)."""
    pending = _ARRIVING.search(text)
    cut = pending.start() if pending else len(text) - max(_held_back(text, m) for m in _MARKERS)
    return text[:cut].rstrip() if text[:cut].strip() else ""


def _tail(text: str, at: int, closer: str | None, final: bool) -> str:
    """The content after the list starting at text[at] and its closing fence or tag: a newline then the
    text, once there is any (trailing whitespace held back until the output ends)."""
    end = value_end(text, at)
    if end is None:
        return ""
    after = skip_ws(text, end)
    if closer is not None and text.startswith(closer, after):
        after += len(closer)
    elif closer is not None and not final:
        return ""  # the closer has not (all) arrived: what follows is not known yet
    rest = text[after:].strip() if final else text[after:].lstrip().rstrip()
    return "\n" + rest if rest else ""
