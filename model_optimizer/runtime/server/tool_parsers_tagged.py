"""Tool calls as JSON objects behind a marker: more of vLLM's `--tool-call-parser` formats.

- `granite` (Granite 3.0/3.1): the whole output is a JSON list of {"name", "arguments"} objects, optionally
  after `<|tool_call|>` or `<tool_call>`; anything else is the answer.
- `jamba` (Jamba 1.5, special tokens), `hunyuan_a13b` (Hunyuan-A13B): a JSON list inside `<tool_calls>` ...
  `</tool_calls>`.
- `minimax` (MiniMax-M1): one JSON object per line inside `<tool_calls>` ... `</tool_calls>`.
- `phi4_mini_json` (Phi-4-mini): `functools[` then the list's objects.
- `internlm` (InternLM2/2.5, special tokens): `<|action_start|><|plugin|>` then one object, whose arguments
  are under "parameters", then `<|action_end|>`; several such blocks are several calls.
- `granite-20b-fc` (Granite-20B-FunctionCalling): `<function_call>` before each object.
- `longcat` (LongCat-Flash) and `ernie45` (ERNIE-4.5): hermes' format, `<longcat_tool_call>` tags for the
  first, `<tool_call>` for the second.

In each, the text before the first marker is content (granite: none, its output is the calls or the
answer), and the calls are read with tool_parsers.py's JSON scanning, so nested brackets and strings holding
markers never cut a call short. A marker with no call behind it is text: the whole output is the answer.
"""

from __future__ import annotations

import json
from collections.abc import Callable

from model_optimizer.runtime.server.tool_parsers import (
    HermesParser,
    PartialCall,
    ToolParser,
    ToolView,
    _content_before,
    _separated_calls,
    skip_ws,
)


class MarkedCallsParser(ToolParser):
    """Calls read after the first MARKER; the text before it is content."""

    MARKER = ""
    LIST = False
    """The calls are a JSON list opened right after the marker (its `[`), else objects one after another."""
    CLOSE = ""
    """What ends the block, for call_frame."""

    def view(self, text: str, final: bool) -> ToolView:
        return marked_view(text, final, self.MARKER, _list_body if self.LIST else _objects_body)

    def call_frame(self, name: str) -> tuple[str, str, str]:
        opening = "[" if self.LIST else ""
        closing = "]" if self.LIST else ""
        begin = f'{self.MARKER}{opening}{{"name": {json.dumps(name)}, "arguments": '
        return self.MARKER, begin, f"}}{closing}{self.CLOSE}"


def marked_view(text: str, final: bool, marker: str, body: Callable[[str, int], list[PartialCall]]) -> ToolView:
    """Content before the first `marker` and the calls `body` reads from the text after it. Once the text is
    final, calls without a name are dropped, and a marker with none behind it leaves the whole text content."""
    first = text.find(marker)
    calls: list[PartialCall] = []
    if first != -1:
        calls = body(text, skip_ws(text, first + len(marker)))
        if final:
            calls = [c for c in calls if c.name is not None]
            first = first if calls else -1
    return ToolView(_content_before(text, first, first != -1, final, marker), calls)


def _list_body(text: str, i: int) -> list[PartialCall]:
    """The objects of the JSON list that opens at text[i] (none while its `[` has not arrived)."""
    return _separated_calls(text, skip_ws(text, i + 1), ",") if text.startswith("[", i) else []


def _objects_body(text: str, i: int) -> list[PartialCall]:
    """Objects one after another from text[i], commas or whitespace between them."""
    return _separated_calls(text, i, ",")


class GraniteParser(ToolParser):
    name = "granite"
    TAGS = ("<|tool_call|>", "<tool_call>")

    def view(self, text: str, final: bool) -> ToolView:
        i = skip_ws(text, 0)
        tag = next((t for t in self.TAGS if text.startswith(t, i)), None)
        if tag is not None:
            i = skip_ws(text, i + len(tag))
        elif not final and any(t.startswith(text[i:]) for t in self.TAGS):
            return ToolView()  # may still become a tag
        if i >= len(text):
            return ToolView(text if final else "")
        if text[i] != "[":
            return ToolView(text)
        calls = _separated_calls(text, skip_ws(text, i + 1), ",")
        if final and not any(c.name for c in calls):  # a list, but not of calls: the model's answer
            return ToolView(text)
        return ToolView("", calls)


class JambaParser(MarkedCallsParser):
    name = "jamba"
    needs_special_tokens = True
    MARKER, CLOSE, LIST = "<tool_calls>", "</tool_calls>", True


class HunyuanA13BParser(MarkedCallsParser):
    name = "hunyuan_a13b"
    MARKER, CLOSE, LIST = "<tool_calls>", "</tool_calls>", True


class MinimaxParser(MarkedCallsParser):
    name = "minimax"
    MARKER, CLOSE = "<tool_calls>", "</tool_calls>"

    def call_frame(self, name: str) -> tuple[str, str, str]:
        """The object on a line of its own, as MiniMax-M1's template shows calls."""
        return self.MARKER, f'{self.MARKER}\n{{"name": {json.dumps(name)}, "arguments": ', f"}}\n{self.CLOSE}"


class Phi4MiniJsonParser(MarkedCallsParser):
    """`functools[{...}, ...]`: the marker takes the list's `[`, so that the word alone starts nothing."""

    name = "phi4_mini_json"
    MARKER, CLOSE = "functools[", "]"


class InternLMParser(HermesParser):
    """hermes' reading with InternLM2's markers: each block one object, its arguments under "parameters"."""

    name = "internlm"
    needs_special_tokens = True
    START, END = "<|action_start|><|plugin|>", "<|action_end|>"

    def call_frame(self, name: str) -> tuple[str, str, str]:
        return self.START, f'{self.START}\n{{"name": {json.dumps(name)}, "parameters": ', f"}}{self.END}"


class Granite20bFCParser(HermesParser):
    """`<function_call> {...}` per call, nothing closing it."""

    name = "granite-20b-fc"
    START = "<function_call>"

    def call_frame(self, name: str) -> tuple[str, str, str]:
        return self.START, f'{self.START} {{"name": {json.dumps(name)}, "arguments": ', "}"


class LongcatParser(HermesParser):
    name = "longcat"
    START, END = "<longcat_tool_call>", "</longcat_tool_call>"


class Ernie45Parser(HermesParser):
    name = "ernie45"
