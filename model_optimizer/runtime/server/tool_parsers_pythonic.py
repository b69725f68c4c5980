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

from model_optimizer.runtime.server.tool_parsers import PartialCall, ToolParser, ToolView, after_leading_tag, skip_ws
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
        calls, broken = _calls(text, i + 1)
        if not calls and (broken or final):  # a list, but not of calls: the model's answer
            return ToolView(text)
        return ToolView("", calls)


def _calls(text: str, i: int) -> tuple[list[PartialCall], bool]:
    """The whole calls of the list whose `[` is just before text[i], and whether the syntax broke."""
    calls: list[PartialCall] = []
    i = skip_ws(text, i)
    while i < len(text) and text[i] != "]":
        call, end = _call(text, i)
        if call is None:
            return calls, end == BAD
        calls.append(call)
        i = skip_ws(text, end)
        if i < len(text) and text[i] == ",":
            i = skip_ws(text, i + 1)
        elif i < len(text) and text[i] != "]":
            return calls, True
    return calls, False


def _call(text: str, i: int) -> tuple[PartialCall | None, int | str]:
    """The call `name(key=value, ...)` at text[i] and the index past it; or (None, WAIT / BAD)."""
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
        argument = _argument(text, j)
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


def _argument(text: str, i: int) -> tuple[str, str, int] | str:
    """`key=literal` at text[i]: (key, the literal as JSON text, index past it), or WAIT / BAD."""
    key = KEYWORD.match(text, i)
    if key is None:
        return BAD
    j = skip_ws(text, key.end())
    if j >= len(text):
        return WAIT
    if text[j] != "=":
        return BAD
    start = skip_ws(text, j + 1)
    end = _literal_end(text, start)
    if end is None:
        return WAIT
    value = literal_json(text[start:end])
    return (key.group(), value, end) if value is not None else BAD


def _literal_end(text: str, i: int) -> int | None:
    """Index of the `,` or `)` (or stray closing bracket) that ends the literal at text[i], or None while it
    has not arrived. Brackets nest; strings (quotes, triple quotes, escapes) are skipped whole."""
    depth, j = 0, i
    while True:  # from one quote, bracket or comma to the next (the scanning in C: a stream re-reads its text)
        found = _STRUCTURE.search(text, j)
        if found is None:
            return None
        j = found.start()
        c = text[j]
        if c in "'\"":
            end = _string_end(text, j)
            if end is None:
                return None
            j = end
            continue
        if c in "([{":
            depth += 1
        elif c in ")]}" or depth == 0:  # a closing bracket, or a comma outside brackets
            if depth == 0:
                return j
            depth -= 1
        j += 1


_STRUCTURE = re.compile(r"['\"()\[\]{},]")
_STRING_BODIES = {
    quote: re.compile(
        rf"(?:[^{q[0]}\\]|\\.|{q[0]}(?!{q[1:]}))*" if len(q) == 3 else rf"[^{q}\\]*(?:\\.[^{q}\\]*)*", re.DOTALL
    )
    for quote in ("'", '"', "'''", '"""')
    for q in [re.escape(quote[0]) * len(quote)]
}
"""Per opening quote: the body of such a string up to its closing quote (escapes skipped)."""


def _string_end(text: str, i: int) -> int | None:
    quote = text[i] * 3 if text.startswith(text[i] * 3, i) else text[i]
    j = _STRING_BODIES[quote].match(text, i + len(quote)).end()  # type: ignore[union-attr]
    return j + len(quote) if text.startswith(quote, j) else None
