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
- `gigachat3` (GigaChat3, a DeepSeek-V3 model; special tokens): the answer, `<|message_sep|>`, then
  `function call<|role_sep|>` and one {"name", "arguments"} object (newer templates: `<|function_call|>`
  before the object); the content is the text before the first of those.

In each, the text before the marker is content (granite: none, its output is the calls or the answer), and
the calls are read with tool_parsers.py's JSON scanning, so nested brackets and strings holding markers never
cut a call short. A marker with no call behind it is text (a later one may start the calls); so is one in
a `<think>` block, for the formats of models that think in their output (minimax, hunyuan_a13b).
"""

from __future__ import annotations

import json
from collections.abc import Callable

from model_optimizer.runtime.server.text_scans import TextScans, arriving, skip_ws
from model_optimizer.runtime.server.tool_parsers import (
    HermesParser,
    PartialCall,
    ToolParser,
    ToolView,
    _content_before,
    _separated_calls,
    keyed_calls,
)


class MarkedCallsParser(ToolParser):
    """Calls read after a MARKER (the first one with calls behind it); the text before it is content."""

    MARKER = ""
    LIST = False
    """The calls are a JSON list opened right after the marker (its `[`), else objects one after another."""
    CLOSE = ""
    """What ends the block, for call_frame."""
    SKIP_THINK = False
    """Markers inside a `<think>` block are text (the model planning a call, not making it)."""

    def view(self, text: str, final: bool) -> ToolView:
        body = _list_body if self.LIST else _objects_body
        return marked_view(self.scans.read(text), final, self.MARKER, body, self.SKIP_THINK)

    def call_frame(self, name: str) -> tuple[str, str, str]:
        opening = "[" if self.LIST else ""
        closing = "]" if self.LIST else ""
        begin = f'{self.MARKER}{opening}{{"name": {json.dumps(name)}, "arguments": '
        return self.MARKER, begin, f"}}{closing}{self.CLOSE}"


def marked_view(
    scans: TextScans,
    final: bool,
    marker: str,
    body: Callable[[TextScans, int], list[PartialCall] | None],
    skip_think: bool = False,
) -> ToolView:
    """Content before the first `marker` with calls behind it, and the calls `body` reads there. A marker
    whose body is known not to be calls (None; once final: no call with a name) is text, and so is one
    inside a `<think>` block when `skip_think`."""
    first, calls = first_calls(scans, final, marker, body, skip_think)
    return ToolView(_content_before(scans.text, first, first != -1, final, marker), calls)


def first_calls(
    scans: TextScans,
    final: bool,
    marker: str,
    body: Callable[[TextScans, int], list[PartialCall] | None],
    skip_think: bool = False,
) -> tuple[int, list[PartialCall]]:
    """Where the first `marker` with calls behind it stands, and those calls; (-1, []) for none (see
    marked_view)."""
    text = scans.text
    at = scans.find(marker, 0)
    while at != -1:
        found = None if skip_think and _in_think(text, at) else body(scans, skip_ws(text, at + len(marker)))
        if found is not None and final:
            found = [c for c in found if c.name is not None] or None
        if found is not None:
            return at, found
        at = scans.find(marker, at + 1)
    return -1, []


def _in_think(text: str, at: int) -> bool:
    """Whether text[at] lies in a `<think>` block (one closed after it, or not closed yet)."""
    opened = text.rfind("<think>", 0, at)
    return opened != -1 and text.find("</think>", opened, at) == -1


def _list_body(scans: TextScans, i: int) -> list[PartialCall] | None:
    """The objects of the JSON list that opens at text[i]: none yet while it has not arrived, None when what
    is there is no list."""
    text = scans.text
    if i >= len(text):
        return []
    return _separated_calls(scans, skip_ws(text, i + 1), ",") if text[i] == "[" else None


def _objects_body(scans: TextScans, i: int) -> list[PartialCall] | None:
    """Objects one after another from text[i], commas or whitespace between them; None when no object
    opens there."""
    if i >= len(scans.text):
        return []
    return _separated_calls(scans, i, ",") if scans.text[i] == "{" else None


class GraniteParser(ToolParser):
    name = "granite"
    TAGS = ("<|tool_call|>", "<tool_call>")

    def view(self, text: str, final: bool) -> ToolView:
        i = skip_ws(text, 0)
        tag = next((t for t in self.TAGS if text.startswith(t, i)), None)
        if tag is not None:
            i = skip_ws(text, i + len(tag))
        elif not final and any(arriving(text, i, t) for t in self.TAGS):
            return ToolView()  # may still become a tag
        if i >= len(text):
            return ToolView(text if final else "")
        if text[i] != "[":
            return ToolView(text)
        calls = _separated_calls(self.scans.read(text), skip_ws(text, i + 1), ",")
        if tag is None:  # no marker: only objects with a name and arguments are calls
            calls = keyed_calls(calls)
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
    SKIP_THINK = True


class MinimaxParser(MarkedCallsParser):
    name = "minimax"
    MARKER, CLOSE = "<tool_calls>", "</tool_calls>"
    SKIP_THINK = True  # MiniMax-M1 always thinks, and vLLM serves it without a reasoning parser

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
    needs_special_tokens = False  # its marker is text, as vLLM's parser of that name reads it
    START = "<function_call>"

    def call_frame(self, name: str) -> tuple[str, str, str]:
        return self.START, f'{self.START} {{"name": {json.dumps(name)}, "arguments": ', "}"


class LongcatParser(HermesParser):
    name = "longcat"
    START, END = "<longcat_tool_call>", "</longcat_tool_call>"


class Ernie45Parser(HermesParser):
    name = "ernie45"


class GigaChat3Parser(ToolParser):
    """No call_frame: a call starts at text and tokens that differ between GigaChat3's templates, so strict
    tools go unconstrained and allowed_tools' mode auto is a 400, as for the formats without JSON frames."""

    name = "gigachat3"
    needs_special_tokens = True
    MARKERS = ("function call<|role_sep|>", "<|function_call|>")
    SEP = "<|message_sep|>"
    """Ends the answer: what follows is a call, or nothing the user reads."""

    def view(self, text: str, final: bool) -> ToolView:
        scans = self.scans.read(text)
        found = [first_calls(scans, final, marker, _objects_body) for marker in self.MARKERS]
        first, calls = min((f for f in found if f[0] != -1), default=(-1, []), key=lambda f: f[0])
        end = scans.find(self.SEP, 0)
        if first != -1:
            return ToolView(text[: first if end == -1 else min(end, first)].rstrip(), calls)
        if end != -1:
            return ToolView(text[:end].rstrip())
        return ToolView(_content_before(text, -1, False, final, (*self.MARKERS, self.SEP)))
