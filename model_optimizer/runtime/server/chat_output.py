"""One chat choice's text as the message a client sees: reasoning, content and tool calls, whole or streamed.

`ChatOutput` holds a choice's text and the parsers that apply to it (reasoning.py, then tool_parsers.py
on what follows the reasoning). `message(text)` gives the whole response's fields; `feed(delta)` and
`finish()` give a stream's delta fields, the new part of each since the last chunk. Both read the same
views, so the concatenated deltas are the response's fields: the same calls, arguments and ids order.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field

from model_optimizer.runtime.server.protocol_structured import CUSTOM_INPUT
from model_optimizer.runtime.server.reasoning import ReasoningParser
from model_optimizer.runtime.server.tool_parsers import PartialCall, ToolParser, ToolView


@dataclass
class ChatMessageFields:
    """What a choice's message holds: content (None when it has none), reasoning, tool calls."""

    content: str | None
    reasoning_content: str | None = None
    tool_calls: list[dict] = field(default_factory=list)
    calls_complete: bool = True
    """Every call's arguments arrived whole (a stop string may cut one short)."""


def custom_input(arguments: str, complete: bool = True) -> str:
    """A custom tool's input from its call's arguments, `{"input": "..."}` (protocol_structured.CUSTOM_INPUT);
    whole text that is not such an object is the input as written. A call cut short (max_tokens, a stop)
    gives what its input string holds so far, decoded, or "" (never the JSON around it)."""
    if not complete:
        return _input_so_far(arguments)
    try:
        held = json.loads(arguments)
    except ValueError:
        return arguments
    value = held.get(CUSTOM_INPUT) if isinstance(held, dict) else None
    return value if isinstance(value, str) else arguments


_INPUT_KEY = re.compile(rf'"{CUSTOM_INPUT}"\s*:\s*"')
_ESCAPE_CHARS = 6
"""The longest escape a cut can split (`\\u00e9`)."""


def _input_so_far(arguments: str) -> str:
    found = _INPUT_KEY.search(arguments)
    if found is None:
        return ""
    rest = arguments[found.end() - 1 :]  # from the string's opening quote
    try:
        return json.JSONDecoder().raw_decode(rest)[0]  # the string closed, the object not
    except ValueError:
        pass
    for cut in range(_ESCAPE_CHARS + 1):  # unterminated: close it, less a split escape at its end
        try:
            return json.loads(rest[: len(rest) - cut] + '"')
        except ValueError:
            continue
    return ""


class ChatOutput:
    def __init__(
        self,
        reasoning: ReasoningParser | None = None,
        tools: ToolParser | None = None,
        include_reasoning: bool = True,
        max_calls: int | None = None,
    ) -> None:
        self.reasoning = reasoning
        self.tools = tools.for_stream() if tools is not None else None
        """The tool-call parser, with scans of this choice's text of its own."""
        self.max_calls = max_calls
        """1 with parallel_tool_calls false: the first call the model wrote is the response's only one."""
        self.include_reasoning = include_reasoning
        """False (vLLM's include_reasoning): the reasoning is split off and dropped, never sent."""
        self.text = ""
        self.token_ids: list[int] = []
        """A stream's token ids so far, kept when a reasoning parser counts them (ChatFormat)."""
        self._sent_reasoning = 0
        self._sent_content = 0
        self._call_ids: list[str] = []
        self._sent_arguments: list[int] = []
        self.calls_complete = True
        """After finish(): every streamed call's arguments arrived whole."""

    @property
    def plain(self) -> bool:
        """No parser applies: the text is the content as it is."""
        return self.reasoning is None and self.tools is None

    def _views(self, text: str, final: bool) -> tuple[str, ToolView]:
        reasoning, rest = self.reasoning.split(text, final) if self.reasoning is not None else ("", text)
        view = self.tools.view(rest, final) if self.tools is not None else ToolView(rest)
        if self.max_calls is not None:
            named = [call for call in view.calls if call.name]
            view.calls = named[: self.max_calls]
        return reasoning, view

    def message(self, text: str) -> ChatMessageFields:
        """The fields of a whole (non-streamed) response's message."""
        reasoning, view = self._views(text, final=True)
        named = [c for c in view.calls if c.name]
        ids: list[str] = []
        for i, c in enumerate(named):
            ids.append(self._call_id(c, i, ids))
        calls = [self._call_dict(c, call_id) for c, call_id in zip(named, ids, strict=True)]
        forced = self.tools is not None and self.tools.forced
        content = view.content if view.content or not (calls or reasoning or forced) else None
        reasoning = (reasoning or None) if self.include_reasoning else None
        return ChatMessageFields(content, reasoning, calls, all(c.complete for c in named))

    def _call_dict(self, call: PartialCall, call_id: str) -> dict:
        if self._is_custom(call):
            return {"id": call_id, "type": "custom", "custom": {"name": call.name, "input": self._input(call)}}
        return {"id": call_id, "type": "function", "function": {"name": call.name, "arguments": call.arguments}}

    def _is_custom(self, call: PartialCall) -> bool:
        return self.tools is not None and call.name in self.tools.custom

    def _input(self, call: PartialCall) -> str:
        return call.arguments if self.tools.raw_input else custom_input(call.arguments, call.complete)  # type: ignore[union-attr]

    def _call_id(self, call: PartialCall, index: int, taken: list[str]) -> str:
        """The id the model wrote for the call (Kimi-K2 writes one), else the format's own, numbered on from
        the conversation's earlier calls; a fresh random one where an earlier call of the response or of the
        conversation has it already: a tool result names its call by id."""
        history = self.tools.history_ids  # type: ignore[union-attr]
        for candidate in (call.id, self.tools.call_id(call.name, len(history) + index)):  # type: ignore[union-attr, arg-type]
            if candidate and candidate not in taken and candidate not in history:
                return candidate
        return ToolParser.call_id(call.name, index)  # type: ignore[arg-type]

    @property
    def num_calls(self) -> int:
        """Tool calls streamed so far."""
        return len(self._call_ids)

    def feed(self, delta: str) -> dict:
        """The delta fields (content, reasoning and reasoning_content, tool_calls) new since the last call."""
        self.text += delta
        return self._delta(final=False)

    def finish(self) -> dict:
        """The delta fields still held back once the choice has ended."""
        return self._delta(final=True)

    def _delta(self, final: bool) -> dict:
        reasoning, view = self._views(self.text, final)
        out: dict = {}
        if len(reasoning) > self._sent_reasoning:
            if self.include_reasoning:  # under both names: vLLM's `reasoning`, DeepSeek's `reasoning_content`
                out["reasoning"] = out["reasoning_content"] = reasoning[self._sent_reasoning :]
            self._sent_reasoning = len(reasoning)
        if len(view.content) > self._sent_content:
            out["content"] = view.content[self._sent_content :]
            self._sent_content = len(view.content)
        named = [call for call in view.calls if call.name]  # as message() counts them; a name "" is none yet
        if final:
            self.calls_complete = all(call.complete for call in named)
        calls = [d for i, call in enumerate(named) if (d := self._call_delta(i, call, final))]
        if calls:
            out["tool_calls"] = calls
        return out

    def _call_delta(self, index: int, call: PartialCall, final: bool) -> dict | None:
        """What is new in named call `index`: its id, type and name the first time, then argument text (a
        custom tool's input: in pieces as written when it is the whole output, else once, when its call is
        whole or the choice has ended)."""
        delta: dict = {"index": index}
        kind = "custom" if self._is_custom(call) else "function"
        if index == len(self._call_ids):
            self._call_ids.append(self._call_id(call, index, self._call_ids))
            self._sent_arguments.append(0)
            delta.update({"id": self._call_ids[index], "type": kind, kind: {"name": call.name}})
        sent = self._sent_arguments[index]
        if kind == "function" and len(call.arguments) > sent:
            delta.setdefault("function", {})["arguments"] = call.arguments[sent:]
            self._sent_arguments[index] = len(call.arguments)
        elif kind == "custom" and self.tools.raw_input and len(call.arguments) > sent:  # type: ignore[union-attr]
            delta.setdefault("custom", {})["input"] = call.arguments[sent:]
            self._sent_arguments[index] = len(call.arguments)
        elif kind == "custom" and (call.complete or final) and sent == 0:  # JSON holding it: once, decoded
            delta.setdefault("custom", {})["input"] = self._input(call)
            self._sent_arguments[index] = max(1, len(call.arguments))
        return delta if len(delta) > 1 else None
