"""A parser's views resume their scans where the last view's stopped (tool_parsers.py's TextScans): fed long
calls in small pieces, every view is the one a fresh parser reads from the whole text, and so are the deltas;
a text that does not extend the last one read is read afresh."""

from __future__ import annotations

import ast
import json
import random
import re

import pytest

from model_optimizer.runtime.server.chat_output import ChatOutput
from model_optimizer.runtime.server.text_scans import JsonValueScan, TextScans
from model_optimizer.runtime.server.tool_parser_registry import PARSERS
from model_optimizer.runtime.server.tool_parsers import HermesParser, _held_back
from model_optimizer.runtime.server.tool_parsers_pythonic import LiteralScan
from model_optimizer.runtime.server.tool_parsers_xlam import _MARKERS, _arriving_content, _marked_lists
from tests.runtime.server.test_tool_parsers import ALIASES, CALL_FRAMES, _streamed
from tests.runtime.server.test_tool_parsers_more import _mutations

CODE = 'def f(s):\n    return {"k": [s, "\\\\", \'<tool_call>\', "}]"]}  # x\'s\n' * 40
"""Code with quotes, escapes, brackets and a marker in its strings: what a call's arguments hold."""
CALL_ARGUMENTS = json.dumps({"code": CODE, "n": [1.5, {"b": "]}"}], "t": True})
PYTHON_ARGUMENTS = (
    f"a={CODE!r}, b='''it''s '' \"quoted\" \\''' ok''', c=\"\"\"x\"\"y\"\"\", d=[1, (2, 'x)'), {{'k': '\\''}}], e=''"
)
PYTHON_LITERALS = [
    r"'''a', 'b''', x",
    r'"""a", "b""", x',
    r"'a\', b', x",
    r"'c\\', x",
    r"'''''', x",
    r"""['''a''b\'''', 'c\\', "d\"", '', "'", ['''', ''']], x""",
]
"""Python literals, then `, x`: strings whose quotes and escapes mean what the characters after them say,
holding commas and brackets that would end the literal early if read wrongly."""
JSON_VALUES = [
    r'{"a": "x\\\"}\\", "b": ["]", "\\", {}], "c": 12} , x',
    r'"a\"}\\" , x',
    r'[1, "\\", "]"] , x',
    "12 , x",
]
"""JSON values, then ` , x`."""
KV_FORMATS = {"glm45", "qwen3_coder", "seed_oss"}
TOOLS = [{"type": "function", "function": {"name": "f", "parameters": {"properties": {"a": {"type": "string"}}}}}]
FORMATS = sorted(name for name in PARSERS if name not in ALIASES)


def long_calls(name: str) -> str:
    """Two long calls in `name`'s format."""
    head, tail = CALL_FRAMES[name]
    if name == "pythonic":
        middle = PYTHON_ARGUMENTS
    elif name in KV_FORMATS:
        middle = CODE
    else:
        middle = CALL_ARGUMENTS
    return head + middle + tail + head + middle + tail


def pieces(text: str, rng: random.Random) -> list[str]:
    """`text` cut in pieces of 1 to 7 characters."""
    out, i = [], 0
    while i < len(text):
        step = rng.randint(1, 7)
        out.append(text[i : i + step])
        i += step
    return out


def test_the_texts_are_what_they_say():
    call = ast.parse("f(" + PYTHON_ARGUMENTS + ")", mode="eval").body
    assert [ast.literal_eval(k.value) for k in call.keywords][0] == CODE  # type: ignore[attr-defined]
    for text in PYTHON_LITERALS:
        ast.literal_eval(text.removesuffix(", x"))
    for text in JSON_VALUES:
        json.loads(text.removesuffix(" , x"))


@pytest.mark.parametrize("name", FORMATS)
def test_long_calls_fed_in_pieces_read_as_fresh_views_of_the_whole_text(name):
    parser = PARSERS[name](TOOLS)
    text = ""
    for piece in pieces(long_calls(name), random.Random(name)):
        text += piece
        assert parser.view(text, final=False) == PARSERS[name](TOOLS).view(text, final=False), (name, len(text))
    final = parser.view(text, final=True)
    assert final == PARSERS[name](TOOLS).view(text, final=True)
    assert final.calls and all(c.complete for c in final.calls)  # the texts hold calls: the test reads them


@pytest.mark.parametrize("name", FORMATS)
def test_streamed_deltas_of_long_calls_add_up_to_the_whole_message(name):
    text = long_calls(name)
    whole = ChatOutput(tools=PARSERS[name](TOOLS)).message(text)
    content, _, calls = _streamed(ChatOutput(tools=PARSERS[name](TOOLS)), pieces(text, random.Random(1)))
    assert content == (whole.content or "")
    assert [(c["name"], c["arguments"]) for c in calls] == [
        (c["function"]["name"], c["function"]["arguments"]) for c in whole.tool_calls
    ]


@pytest.mark.parametrize("name", FORMATS)
def test_a_text_that_is_not_the_last_one_grown_is_read_afresh(name):
    """Views of texts that jump (to a shorter text, a cut or spliced copy, then grow again) match fresh ones."""
    rng = random.Random(name)
    whole = long_calls(name)
    parser = PARSERS[name](TOOLS)
    text = ""
    for _ in range(300):
        if rng.random() < 0.15:
            text = rng.choice([whole[: rng.randint(0, len(text))], *_mutations(whole, rng, 1)])
        else:
            grown = whole if whole.startswith(text) else text + whole[len(text) :]
            text = grown[: len(text) + rng.randint(1, 60)]
        final = rng.random() < 0.1
        assert parser.view(text, final) == PARSERS[name](TOOLS).view(text, final), (name, text)


def test_a_scan_kept_from_a_text_that_was_not_grown_would_be_wrong():
    """Hermes' arguments cut inside a string, then the same call closed earlier in a new text: the open string
    scanned so far must not carry over (the call is whole in the new text)."""
    parser = HermesParser()
    head = '<tool_call>{"name": "f", "arguments": {"code": "' + "x" * 500
    assert parser.view(head, final=False).calls[0].complete is False
    view = parser.view(head[:-400] + '"}}</tool_call>', final=False)
    assert view.calls[0].complete and json.loads(view.calls[0].arguments) == {"code": "x" * 100}


@pytest.mark.parametrize(
    ("kind", "text", "end"),
    [(LiteralScan, text, len(text) - 3) for text in PYTHON_LITERALS]
    + [(JsonValueScan, text, len(text) - 4) for text in JSON_VALUES],
)
def test_a_scan_stopped_anywhere_ends_where_a_fresh_one_does(kind, text, end):
    """A value's scan stopped at any point (inside quotes, escapes, a triple quote that may be arriving) and
    resumed on any longer text finds the end a fresh scan of that text finds."""
    assert TextScans(text).end(kind, 0) == end
    for stop in range(len(text) + 1):
        fresh = TextScans(text[:stop]).end(kind, 0)
        for earlier in range(stop):
            scans = TextScans()
            scans.read(text[:earlier]).end(kind, 0)
            assert scans.read(text[:stop]).end(kind, 0) == fresh, (text[:earlier], text[:stop])


def test_the_choices_of_a_request_share_its_parser_but_not_its_scans():
    """ChatOutput reads each choice through a copy of the request's parser: interleaved streams stay apart."""
    parser = HermesParser()
    outputs = [ChatOutput(tools=parser), ChatOutput(tools=parser)]
    texts = [long_calls("hermes"), long_calls("hermes").replace("code", "text")]
    arguments = ["", ""]
    for i in range(0, len(texts[0]), 5):
        for k in (0, 1):
            for call in outputs[k].feed(texts[k][i : i + 5]).get("tool_calls", []):
                arguments[k] += call.get("function", {}).get("arguments", "") if call["index"] == 0 else ""
    assert arguments == [CALL_ARGUMENTS, CALL_ARGUMENTS.replace("code", "text")]
    assert outputs[0].tools is not outputs[1].tools and outputs[0].tools.scans is not outputs[1].tools.scans


XLAM_START = re.compile(
    r"(?P<fence>```(?:json)?\s*)\[|(?P<mistral>\[TOOL_CALLS\]\s*)\[|(?P<tag><tool_call>\s*)\[|(?P<think></think>)\s*\["
)
XLAM_ARRIVING = re.compile(r"(?:```(?:j(?:s(?:on?)?)?)?|\[TOOL_CALLS\]|<tool_call>|</think>)\s*$")
"""The regular expressions xlam searched its whole text with at every delta, before it resumed finds."""


def test_xlam_finds_the_lists_and_arriving_markers_its_regular_expressions_found():
    rng = random.Random(3)
    fragments = ["```", "json", "js", "[TOOL_CALLS]", "<tool_call>", "</think>", "[", "{", " ", "\n", "\x0b", "\xa0"]
    fragments += ["x", "`", "1", "]", "<", "TOOL_CALLS]", "</th"]
    for _ in range(4000):
        text = "".join(rng.choice(fragments) for _ in range(rng.randint(0, 12)))
        lists = [
            (
                m.end() - 1,
                m.end("think") if m.lastgroup == "think" else m.start(),
                {"fence": "```", "tag": "</tool_call>"}.get(m.lastgroup or ""),
            )
            for m in XLAM_START.finditer(text)
        ]
        assert list(_marked_lists(TextScans(text))) == lists, text
        pending = XLAM_ARRIVING.search(text)
        cut = pending.start() if pending else len(text) - max(_held_back(text, m) for m in _MARKERS)
        assert _arriving_content(text) == (text[:cut].rstrip() if text[:cut].strip() else ""), text


@pytest.mark.parametrize(
    ("name", "text"),
    [
        ("mistral", '[TOOL_CALLS][{"name": "", "arguments": {"s": 1}}]'),
        ("granite", '[{"name": "", "arguments": {"s": 1}}]'),
        ("xlam", '[{"name": "", "arguments": {"s": 1}}]'),
        ("hermes", '<tool_call>{"name": "", "arguments": {"s": 1}}</tool_call>'),
    ],
)
def test_a_call_named_nothing_is_text_whole_and_streamed(name, text):
    """A call whose name is "" was streamed as a call (then its text again as content) while the whole
    message had no call; hermes returned it as a call with an empty name."""
    whole = ChatOutput(tools=PARSERS[name]()).message(text)
    assert whole.tool_calls == [] and whole.content == text
    for pieces in ([text], list(text)):
        output = ChatOutput(tools=PARSERS[name]())
        assert _streamed(output, pieces) == (text, "", []) and output.num_calls == 0
