"""OpenAI's harmony format (gpt-oss): the messages of an output, and `--tool-call-parser openai`.

A gpt-oss turn is a run of messages after the prompt's `<|start|>assistant`. Each has a header, then
`<|message|>`, then its body up to `<|end|>`, `<|call|>` or `<|return|>` (the last two stop generation, so
they rarely reach the text), or up to the next header: every message after the first opens with
`<|start|>assistant`, and a forced answer header (a thinking budget's `<|channel|>final<|message|>`) may
follow a body directly. The header
names the channel (`<|channel|>analysis`: the reasoning; `final`: the answer; `commentary`: tool calls and
preambles) and, for a call, its recipient (` to=functions.NAME`, after the channel or after the role)
and the arguments' format (` <|constrain|>json`). The markers are special tokens: the text must keep
them (skip_special_tokens off).

`read_messages` reads a text, possibly still arriving, into messages. Text before the first header (an
output that is not in the format at all, or what a reasoning parser left of one) is a message of no
channel. A header counts once its `<|message|>` has arrived, and a body's end is held back while it may
be the start of a marker, so messages, read again as text arrives, only grow: streamed and whole
readings agree.

The reasoning parser `openai_gptoss` (reasoning.py) takes the analysis bodies for reasoning and leaves
the rest as content: the bodies of final and commentary messages, and each call, as written, for this
module's tool parser. `openai` reads the calls (recipient `functions.NAME`, the body its arguments) and
takes every other body for content; alone, without the reasoning parser, that includes the analysis.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from dataclasses import dataclass

from model_optimizer.runtime.server.tool_parsers import PartialCall, ToolParser, ToolView, _held_back
from model_optimizer.runtime.structured.grammar import COMPACT_JSON
from model_optimizer.runtime.structured.json_schema import prepare

START, CHANNEL, MESSAGE = "<|start|>", "<|channel|>", "<|message|>"
ENDS = ("<|end|>", "<|call|>", "<|return|>")
OPENERS = (START, CHANNEL)
"""Markers that begin a message's header."""
ANALYSIS = "analysis"
NEXT_MESSAGE = "<|end|>" + START + "assistant"
"""What ends a message and opens the model's next one."""
ANSWER_HEADER = NEXT_MESSAGE + CHANNEL + "final" + MESSAGE
"""What ends the analysis and opens the answer, as gpt-oss writes it: an output constraint applies after it,
and a thinking budget forces it."""
FUNCTIONS = "functions."
"""The namespace of the request's tools among recipients (others, `browser.search` or `python`, are the
model's built-in tools, which this server does not run)."""
CONSTRAIN = "<|constrain|>"
_CHANNEL_NAME = re.compile(re.escape(CHANNEL) + r"\s*([A-Za-z_]+)")
_RECIPIENT = re.compile(r"\bto=([^\s<]+)")


@dataclass
class HarmonyMessage:
    channel: str
    """"analysis", "final", "commentary", ...; "" for text outside any header."""
    recipient: str | None
    body: str
    """As far as it has arrived (a possible start of an end marker held back)."""
    raw: str
    """The message as written, header and end marker included (as far as it has arrived)."""
    complete: bool


def read_messages(text: str, final: bool) -> list[HarmonyMessage]:
    """The messages of `text`, the last one possibly still arriving; `final`: no more text comes (nothing
    is held back, and a header cut short is dropped)."""
    messages = []
    first = _first(text, OPENERS, 0)
    if first != 0:  # text before any header
        end = len(text) if first == -1 else first
        held = 0 if final or first != -1 else max(_held_back(text, m) for m in OPENERS)
        plain = text[: end - held]
        if plain:
            messages.append(HarmonyMessage("", None, plain, plain, first != -1 or final))
        if first == -1:
            return messages
    at = first
    while at < len(text):
        opened = text.find(MESSAGE, at)
        if opened == -1:
            break  # the header is still arriving
        header = text[at:opened]
        body_at = opened + len(MESSAGE)
        end = _first(text, (*ENDS, *OPENERS), body_at)
        channel = match.group(1) if (match := _CHANNEL_NAME.search(header)) else ""
        recipient = match.group(1) if (match := _RECIPIENT.search(header)) else None
        if end == -1:
            held = 0 if final else max(_held_back(text, m) for m in (*ENDS, *OPENERS))
            stop = max(len(text) - held, body_at)
            messages.append(HarmonyMessage(channel, recipient, text[body_at:stop], text[at:stop], final))
            break
        marker = next((m for m in ENDS if text.startswith(m, end)), "")  # none before a header
        after = end + len(marker)
        messages.append(HarmonyMessage(channel, recipient, text[body_at:end], text[at:after], True))
        at = after
    return messages


def _first(text: str, markers: tuple[str, ...], at: int) -> int:
    """Where the first of `markers` occurs in text[at:], or -1."""
    return min((i for m in markers if (i := text.find(m, at)) != -1), default=-1)


def opened_message(prompt: str | None) -> bool:
    """The prompt ends inside a message (its header and `<|message|>`): the output goes on in that body."""
    return (prompt or "").rstrip().endswith(MESSAGE)


def call_grammar(tools: list[tuple[str, dict]], opened: bool, encode: Callable[[str], list[int]]) -> str:
    """The llguidance grammar (Lark) of the rest of a gpt-oss turn that must end in a call to one of `tools`
    ((name, parameters schema) pairs): the message the prompt ended in (`opened`) finished, or, after
    `<|start|>assistant`, an analysis message or none; then the call as gpt-oss writes one,
    `<|channel|>commentary to=functions.NAME <|constrain|>json<|message|>`, and its arguments under the
    tool's schema (compact JSON). The model's end tokens follow (gpt-oss's include `<|call|>`).

    Headers are spelled as the tokens `encode` (the model's tokenizer) gives them, the text in them too: the
    model writes them as it was trained to, and a thinking budget, which finds the analysis header by its
    tokens, sees it. ValueError for a schema the grammar engine cannot keep (json_schema.prepare)."""

    def exact(text: str) -> str:
        return " ".join(f"<[{token}]>" for token in encode(text))

    rules = ["%llguidance {}"]
    ended = f"/(?s:.*)/ {exact(NEXT_MESSAGE)}"  # free text holds no marker: the first <|end|> ends it
    rules.append(f"start: {ended} call" if opened else f"start: ({exact(CHANNEL + ANALYSIS + MESSAGE)} {ended})? call")
    rules.append("call: " + " | ".join(f"call{i}" for i in range(len(tools))))
    for i, (name, schema) in enumerate(tools):
        header = exact(f"{CHANNEL}commentary to={FUNCTIONS}{name} {CONSTRAIN}json{MESSAGE}")
        rules.append(f"call{i}: {header} %json {json.dumps({**prepare(schema), 'x-guidance': COMPACT_JSON})}")
    return "\n".join(rules)


def function_name(recipient: str | None) -> str | None:
    """The request's tool a message is addressed to (`functions.NAME`), or None."""
    if recipient is None or not recipient.startswith(FUNCTIONS):
        return None
    return recipient[len(FUNCTIONS) :] or None


class HarmonyToolParser(ToolParser):
    """`openai` (gpt-oss): a message to `functions.NAME` is a call, its body the arguments' JSON; every other
    message's body is content. It frames no call for strict tools: a structural tag's free text holds no special
    token, so gpt-oss could not write its own messages around the call."""

    name = "openai"
    needs_special_tokens = True

    def view(self, text: str, final: bool) -> ToolView:
        content, calls = "", []
        for message in read_messages(text, final):
            name = function_name(message.recipient)
            if name is None:
                content += message.body
            else:
                arguments = message.body.lstrip() or ("{}" if message.complete else "")  # none written: none taken
                calls.append(PartialCall(name=name, arguments=arguments, complete=message.complete))
        return ToolView(content, calls)
