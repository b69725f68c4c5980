"""Tool calls as a Python list, `pythonic` (Llama 3.2, Llama 4): `[get_weather(city="Paris"), f(x=1)]`.

The whole output is the list (optionally after `<|python_start|>`), or it is the answer, as content.
Arguments are keyword arguments whose values are Python literals (strings, numbers, True/False/None,
lists, tuples, dicts), read with `ast.literal_eval` and sent as JSON. A call shows once its closing
parenthesis has arrived and every value has read as a literal: a view never has to take back a name or
an argument (tool_parsers.py). A call that breaks the syntax ends the list: the calls before it stand.
When the first call breaks it, the output is the answer. What follows the closing `]` is left out.
"""

from __future__ import annotations

import json
import re

from model_optimizer.runtime.server.text_scans import Scan, TextScans, skip_ws
from model_optimizer.runtime.server.tool_parsers import (
    PartialCall,
    ToolParser,
    ToolView,
    after_leading_tag,
)
from model_optimizer.runtime.server.tool_parsers_kv import literal_json

NAME = re.compile(r"[A-Za-z_][\w.]*")
KEYWORD = re.compile(r"[A-Za-z_]\w*")
WAIT, BAD = "wait", "bad"
"""What a call that is not whole yet is: still arriving, or never going to be a call."""


class PythonicParser(ToolParser):
    name = "pythonic"
    TAG = "<|python_start|>"

    def view(self, text: str, final: bool) -> ToolView:
        i = after_leading_tag(text, self.TAG, final)
        if isinstance(i, ToolView):
            return i
        if text[i] != "[":
            return ToolView(text)
        calls, broken = _calls(self.scans.read(text), i + 1)
        if not calls and (broken or final):  # a list, but not of calls: the model's answer
            return ToolView(text)
        return ToolView("", calls)


def _calls(scans: TextScans, i: int) -> tuple[list[PartialCall], bool]:
    """The whole calls of the list whose `[` is just before text[i], and whether the syntax broke."""
    text = scans.text
    calls: list[PartialCall] = []
    i = skip_ws(text, i)
    while i < len(text) and text[i] != "]":
        call, end = _call(scans, i)
        if call is None:
            return calls, end == BAD
        calls.append(call)
        i = skip_ws(text, end)
        if i < len(text) and text[i] == ",":
            i = skip_ws(text, i + 1)
        elif i < len(text) and text[i] != "]":
            return calls, True
    return calls, False


def _call(scans: TextScans, i: int) -> tuple[PartialCall | None, int | str]:
    """The call `name(key=value, ...)` at text[i] and the index past it; or (None, WAIT / BAD)."""
    text = scans.text
    name = NAME.match(text, i)
    if name is None:
        return None, BAD
    j = skip_ws(text, name.end())
    if j >= len(text):
        return None, WAIT
    if text[j] != "(":
        return None, BAD
    arguments = []
    j = skip_ws(text, j + 1)
    while j < len(text) and text[j] != ")":
        argument = _argument(scans, j)
        if isinstance(argument, str):
            return None, argument
        key, value, j = argument
        arguments.append(f"{json.dumps(key)}: {value}")
        j = skip_ws(text, j)
        if j < len(text) and text[j] == ",":
            j = skip_ws(text, j + 1)
        elif j < len(text) and text[j] != ")":
            return None, BAD
    if j >= len(text):
        return None, WAIT
    return PartialCall(name.group(), "{" + ", ".join(arguments) + "}", complete=True), j + 1


def _argument(scans: TextScans, i: int) -> tuple[str, str, int] | str:
    """`key=literal` at text[i]: (key, the literal as JSON text, index past it), or WAIT / BAD."""
    text = scans.text
    key = KEYWORD.match(text, i)
    if key is None:
        return BAD
    j = skip_ws(text, key.end())
    if j >= len(text):
        return WAIT
    if text[j] != "=":
        return BAD
    start = skip_ws(text, j + 1)
    end = scans.end(LiteralScan, start)
    if end is None:
        return WAIT
    value = scans.cached(start, literal_json, text[start:end])
    return (key.group(), value, end) if value is not None else BAD


class LiteralScan(Scan):
    """The index of the `,` or `)` (or stray closing bracket) that ends the literal at text[start]. Brackets
    nest; strings (quotes, triple quotes, escapes) are skipped whole. From one quote, bracket or comma to
    the next, the scanning in C."""

    def __init__(self, start: int) -> None:
        super().__init__(start)
        self.depth = 0
        """Brackets open at `at`."""
        self.quote: str | None = None
        """The quote of the string `at` lies in, whose body has been read up to there."""

    def go_on(self, text: str) -> int | None:
        while True:
            if self.quote is not None:
                body_end = _STRING_BODIES[self.quote].match(text, self.at).end()  # type: ignore[union-attr]
                if not text.startswith(self.quote, body_end):
                    self.at = _body_resume(text, self.at, body_end, self.quote)
                    return None
                self.at, self.quote = body_end + len(self.quote), None
                continue
            found = _STRUCTURE.search(text, self.at)
            if found is None:
                self.at = len(text)
                return None
            j, c = found.start(), found.group()
            if c in "'\"":
                if _arriving_quote(text, j):
                    self.at = j
                    return None
                self.quote = c * 3 if text.startswith(c * 3, j) else c
                self.at = j + len(self.quote)
                continue
            if c in "([{":
                self.depth += 1
            elif c in ")]}" or self.depth == 0:  # a closing bracket, or a comma outside brackets
                if self.depth == 0:
                    return j
                self.depth -= 1
            self.at = j + 1


_STRUCTURE = re.compile(r"['\"()\[\]{},]")
_STRING_BODIES = {
    quote: re.compile(
        rf"(?:[^{q[0]}\\]|\\.|{q[0]}(?!{q[1:]}))*" if len(q) == 3 else rf"[^{q}\\]*(?:\\.[^{q}\\]*)*", re.DOTALL
    )
    for quote in ("'", '"', "'''", '"""')
    for q in [re.escape(quote[0]) * len(quote)]
}
"""Per opening quote: the body of such a string up to its closing quote (escapes skipped)."""


def _arriving_quote(text: str, i: int) -> bool:
    """Whether the quote opening at text[i] may still become a triple quote (the text ends in one or two)."""
    opening = text[i : i + 3]
    return opening != text[i] * 3 and (text[i] * 3).startswith(opening)


def _body_resume(text: str, start: int, stop: int, quote: str) -> int:
    """Where the scan of a string body, which went from text[start] to text[stop] without finding its closing
    `quote`, goes on once more text has arrived: just past the last character that is neither a quote nor
    a backslash (what those two mean can hang on the characters after them), else at `start`."""
    while stop > start and text[stop - 1] in (quote[0], "\\"):
        stop -= 1
    return stop
