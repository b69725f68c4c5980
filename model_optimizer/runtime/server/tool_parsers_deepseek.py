"""Tool calls between special-token markers, each with its name and JSON arguments: DeepSeek's and Kimi-K2's.

- `deepseek_v3` (DeepSeek-V3, R1-0528): `<｜tool▁calls▁begin｜>` then per call `<｜tool▁call▁begin｜>function
  <｜tool▁sep｜>NAME`, a newline, the arguments in a ```json fence and `<｜tool▁call▁end｜>`; special tokens.
- `deepseek_v31` (DeepSeek-V3.1): the same markers, `NAME<｜tool▁sep｜>` and the bare JSON arguments.
- `kimi_k2` (Kimi-K2): a section of `<|tool_call_begin|>functions.NAME:INDEX<|tool_call_argument_begin|>`
  calls with JSON arguments; the model's id is the call's id.

Views as tool_parsers.py's: only growing, read through the stream's TextScans.
"""

from __future__ import annotations

import re

from model_optimizer.runtime.server.text_scans import TextScans, arriving, skip_ws
from model_optimizer.runtime.server.tool_parsers import (
    PartialCall,
    ToolParser,
    ToolView,
    _content_before,
    _held_back,
    marks_calls,
)


class DeepSeekV3Parser(ToolParser):
    """DeepSeek-V3's calls: special-token markers around a name and a ```json fenced arguments object. Some
    outputs leave out the outer `<｜tool▁calls▁begin｜>`: a lone `<｜tool▁call▁begin｜>` starts calls too."""

    name = "deepseek_v3"
    needs_special_tokens = True
    CALLS_BEGIN, CALLS_END = "<｜tool▁calls▁begin｜>", "<｜tool▁calls▁end｜>"
    CALL_BEGIN, SEP, CALL_END = "<｜tool▁call▁begin｜>", "<｜tool▁sep｜>", "<｜tool▁call▁end｜>"
    ALSO: tuple[str, ...] = ()
    """Other spellings of a marker that starts calls, kept out of content while they may be arriving."""

    def call_frame(self, name: str) -> tuple[str, str, str]:
        """One call a block (the template's form of each call, fenced JSON arguments)."""
        begin = f"{self.CALLS_BEGIN}{self.CALL_BEGIN}function{self.SEP}{name}\n```json\n"
        return self.CALLS_BEGIN, begin, f"\n```{self.CALL_END}{self.CALLS_END}"

    def view(self, text: str, final: bool) -> ToolView:
        scans = self.scans.read(text)
        starts = (scans.find(self.CALLS_BEGIN, 0), scans.find(self.CALL_BEGIN, 0))
        first = min((i for i in starts if i != -1), default=-1)
        calls: list[PartialCall] = []
        if first != -1:
            stop = scans.find(self.CALLS_END, first)  # anything after the calls block is not a call
            body = scans if stop == -1 else TextScans(text[:stop])  # once closed, read afresh: little follows it
            at = body.find(self.CALL_BEGIN, first)
            while at != -1:
                call, end = self._call(body, at + len(self.CALL_BEGIN))
                if call is None:
                    break
                calls.append(call)
                at = body.find(self.CALL_BEGIN, end) if end is not None else -1
        content = _content_before(
            text, first, marks_calls(first, calls, final), final, (self.CALLS_BEGIN, self.CALL_BEGIN, *self.ALSO)
        )
        return ToolView(content, calls)

    def _call(self, scans: TextScans, i: int) -> tuple[PartialCall | None, int | None]:
        """The call whose `type<｜tool▁sep｜>` starts at text[i] (None until its name has all arrived) and the
        index past it (None while it goes on)."""
        text = scans.text
        sep = scans.find(self.SEP, i)
        close = scans.find(self.CALL_END, i)
        newline = text.find("\n", sep, close if close != -1 else len(text)) if sep != -1 else -1
        name = text[sep + len(self.SEP) : newline].strip()
        if newline == -1 or not name:
            return None, None  # the name goes on, or the call is not in this format
        call = PartialCall(name=name)
        j = skip_ws(text, newline)
        if text.startswith("```", j):  # the fence and its language tag
            j = scans.find("\n", j) + 1
            if j == 0:
                return call, None
        elif arriving(text, j, "```"):
            return call, None
        return self._arguments(call, scans, skip_ws(text, j))

    def _arguments(self, call: PartialCall, scans: TextScans, j: int) -> tuple[PartialCall, int | None]:
        """`call` with its arguments from text[j]: a JSON object whole, else the raw text up to the end
        marker (never a piece of either end marker); and the index past the call (None while it goes on)."""
        text = scans.text
        close = scans.find(self.CALL_END, j)
        end = scans.value_end(j) if text.startswith("{", j) else None
        if end is not None and (close == -1 or end <= close):
            call.arguments, call.complete = text[j:end], True
            return call, end
        held = max(_held_back(text, self.CALL_END), _held_back(text, self.CALLS_END))
        call.arguments = text[j:close] if close != -1 else text[j : len(text) - held]
        return call, close + len(self.CALL_END) if close != -1 else None


class DeepSeekV31Parser(DeepSeekV3Parser):
    """DeepSeek-V3.1's calls: the same markers, but the name before `<｜tool▁sep｜>` and the arguments' JSON
    straight after it, no type and no fence: `<｜tool▁call▁begin｜>NAME<｜tool▁sep｜>{...}<｜tool▁call▁end｜>`."""

    name = "deepseek_v31"

    def call_frame(self, name: str) -> tuple[str, str, str]:
        return (
            self.CALLS_BEGIN,
            f"{self.CALLS_BEGIN}{self.CALL_BEGIN}{name}{self.SEP}",
            f"{self.CALL_END}{self.CALLS_END}",
        )

    def _call(self, scans: TextScans, i: int) -> tuple[PartialCall | None, int | None]:
        text = scans.text
        sep = scans.find(self.SEP, i)
        name = text[i:sep].strip() if sep != -1 else ""
        if not name:
            return None, None  # the name goes on, or the call is not in this format
        return self._arguments(PartialCall(name=name), scans, skip_ws(text, sep + len(self.SEP)))


class KimiK2Parser(DeepSeekV3Parser):
    """Kimi-K2's calls: a section of special-token markers, each call's id (`functions.NAME:INDEX`), then its
    JSON arguments: `<|tool_calls_section_begin|><|tool_call_begin|>functions.get_weather:0
    <|tool_call_argument_begin|>{...}<|tool_call_end|><|tool_calls_section_end|>`. The id is the call's id
    in the response (Kimi's template writes it back so), the name its part between `functions.` and the
    last colon.
    Some outputs spell the section markers singular (`tool_call_section`): they count the same."""

    name = "kimi_k2"
    CALLS_BEGIN, CALLS_END = "<|tool_calls_section_begin|>", "<|tool_calls_section_end|>"
    CALL_BEGIN, SEP, CALL_END = "<|tool_call_begin|>", "<|tool_call_argument_begin|>", "<|tool_call_end|>"
    ALSO = ("<|tool_call_section_begin|>",)

    @staticmethod
    def call_id(name: str, index: int) -> str:
        return f"functions.{name}:{index}"

    def call_frame(self, name: str) -> tuple[str, str, str]:
        begin = f"{self.CALLS_BEGIN}{self.CALL_BEGIN}{self.call_id(name, 0)}{self.SEP}"
        return self.CALLS_BEGIN, begin, f"{self.CALL_END}{self.CALLS_END}"

    def view(self, text: str, final: bool) -> ToolView:
        scans = self.scans.read(text)
        singular = scans.find(self.ALSO[0], 0)
        if singular != -1 and not -1 < scans.find(self.CALLS_BEGIN, 0) < singular:  # spelled so throughout
            spelled = _KimiK2Singular(self.tools)
            spelled.scans = scans  # of the same text: they stand
            return spelled.view(text, final)
        return super().view(text, final)

    def _call(self, scans: TextScans, i: int) -> tuple[PartialCall | None, int | None]:
        text = scans.text
        sep = scans.find(self.SEP, i)
        call_id = text[i:sep].strip() if sep != -1 else ""
        numbered = _KIMI_ID.fullmatch(call_id)  # the name may hold dots and colons itself
        name = numbered.group(1) if numbered else call_id
        if not name:
            return None, None  # the id goes on, or the call is not in this format
        call = PartialCall(name=name, id=call_id if numbered else None)
        return self._arguments(call, scans, skip_ws(text, sep + len(self.SEP)))


_KIMI_ID = re.compile(r"(?:functions\.)?(.+):\d+", re.DOTALL)
"""A Kimi-K2 call id: `functions.NAME:INDEX` (the prefix sometimes left out)."""


class _KimiK2Singular(KimiK2Parser):
    """Kimi-K2's calls in a section spelled `<|tool_call_section_begin|>` ... `<|tool_call_section_end|>`."""

    CALLS_BEGIN, CALLS_END = "<|tool_call_section_begin|>", "<|tool_call_section_end|>"
    view = DeepSeekV3Parser.view
