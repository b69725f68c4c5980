"""`xlam` (Salesforce xLAM): the calls are a JSON list of {"name", "arguments"} objects.

The list is the whole output, or sits inside a ```json fence, after `[TOOL_CALLS]`, inside `<tool_call>` tags,
or after a `</think>`; only the first such list counts. The text around it is content: what comes before
it, then what follows its closing fence or tag. A list that holds no call (`[1, 2]`, a fenced list of
numbers) is content too, known once the output has ended.
"""

from __future__ import annotations

import re
from collections.abc import Iterator

from model_optimizer.runtime.server.text_scans import TextScans, skip_ws
from model_optimizer.runtime.server.tool_parsers import (
    ToolParser,
    ToolView,
    _held_back,
    _separated_calls,
)

_MARKERS = ("```", "[TOOL_CALLS]", "<tool_call>", "</think>")
"""What a list of calls may follow (after a fence, `json` may come first), whitespace between them."""
_CLOSERS = {"```": "```", "<tool_call>": "</tool_call>"}
_ARRIVING = ("```json", "```jso", "```js", "```j", *_MARKERS)
"""What may end the text (then whitespace) while the list after it has yet to come."""
_SPACE = re.compile(r"\s*")


class XlamParser(ToolParser):
    name = "xlam"

    def view(self, text: str, final: bool) -> ToolView:
        scans = self.scans.read(text)
        found = _calls_list(scans)
        if found is None:
            return ToolView(text if final else _arriving_content(text))
        at, head_end, closer = found
        calls = _separated_calls(scans, skip_ws(text, at + 1), ",")
        named = any(c.name for c in calls)
        if final and not named:
            return ToolView(text)  # no call in the list: the model's answer
        tail = _tail(scans, at, closer, final) if named else ""
        return ToolView(text[:head_end].rstrip() + tail, calls)


def _calls_list(scans: TextScans) -> tuple[int, int, str | None] | None:
    """(where the first list of objects opens, where the content before it ends, its closing fence or tag)
    of the text, or None. A list whose first element has not arrived counts; one of other values does not.
    The lists are tried in order: a text whose calls come first is read no further."""
    text = scans.text
    start = skip_ws(text, 0)
    if text.startswith("[", start) and _of_objects(text, start):
        return start, 0, None
    return next((found for found in _marked_lists(scans) if _of_objects(text, found[0])), None)


def _marked_lists(scans: TextScans) -> Iterator[tuple[int, int, str | None]]:
    """(where, where the content before it ends, its closer) of each list after a marker, in order: a marker
    (`json` may follow a fence), whitespace, `[`; a marker inside an earlier one's list head starts none."""
    text = scans.text
    found = {marker: scans.find(marker, 0) for marker in _MARKERS}
    taken = 0
    while any(at != -1 for at in found.values()):
        marker = min((m for m in _MARKERS if found[m] != -1), key=lambda m: found[m])
        at = found[marker]
        found[marker] = scans.find(marker, at + 1)
        head = at + len(marker)
        if marker == "```" and text.startswith("json", head):
            head += len("json")
        bracket = _SPACE.match(text, head).end()  # type: ignore[union-attr]
        if at >= taken and text.startswith("[", bracket):
            taken = bracket + 1
            content_end = head if marker == "</think>" else at  # the tag stays with the thinking
            yield bracket, content_end, _CLOSERS.get(marker)


def _of_objects(text: str, at: int) -> bool:
    """Whether the list opening at text[at] is one of objects, as far as it has arrived."""
    first = skip_ws(text, at + 1)
    return first >= len(text) or text[first] == "{"


def _arriving_content(text: str) -> str:
    """Content of a text without a list of calls yet: all but a marker that may be arriving, and trailing
    whitespace (a list could follow it)."""
    end = len(text.rstrip())
    pending = next((marker for marker in _ARRIVING if text.endswith(marker, 0, end)), None)
    cut = end - len(pending) if pending else len(text) - max(_held_back(text, m) for m in _MARKERS)
    return text[:cut].rstrip() if text[:cut].strip() else ""


def _tail(scans: TextScans, at: int, closer: str | None, final: bool) -> str:
    """The content after the list starting at text[at] and its closing fence or tag: a newline then the
    text, once there is any (trailing whitespace held back until the output ends)."""
    text = scans.text
    end = scans.value_end(at)
    if end is None:
        return ""
    after = skip_ws(text, end)
    if closer is not None and text.startswith(closer, after):
        after += len(closer)
    elif closer is not None and not final:
        return ""  # the closer has not (all) arrived: what follows is not known yet
    rest = text[after:].strip() if final else text[after:].lstrip().rstrip()
    return "\n" + rest if rest else ""
