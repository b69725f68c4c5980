"""The granite, granite-20b-fc, jamba, hunyuan_a13b, minimax, phi4_mini_json, internlm, longcat, ernie45,
seed_oss and gigachat3 tool-call parsers, and the names vLLM gives formats read by others, on texts in each model's format:
read whole, in every prefix and in small chunks, they give the same calls, views only grow, and broken or
cut-off texts never raise (the checks of test_tool_parsers_more.py)."""

from __future__ import annotations

import json
import random

import pytest

from model_optimizer.runtime.server.chat_output import ChatOutput
from model_optimizer.runtime.server.tool_parser_registry import PARSERS
from model_optimizer.runtime.server.tool_parsers import HermesParser, Llama3JsonParser
from model_optimizer.runtime.server.tool_parsers_kv import Glm45Parser, SeedOssParser
from model_optimizer.runtime.server.tool_parsers_pythonic import PythonicParser
from model_optimizer.runtime.server.tool_parsers_tagged import (
    Ernie45Parser,
    GigaChat3Parser,
    Granite20bFCParser,
    GraniteParser,
    HunyuanA13BParser,
    InternLMParser,
    JambaParser,
    LongcatParser,
    MinimaxParser,
    Phi4MiniJsonParser,
)
from tests.runtime.server.test_tool_parsers_more import (
    TOOLS,
    _calls,
    assert_broken_texts_agree,
    assert_same_calls_however_fed,
)

WEATHER = {"city": "Oslo", "days": [1, 2], "note": "a ] and a } and <tool_calls>"}
CALL = '{"name": "get_weather", "arguments": ' + json.dumps(WEATHER) + "}"
TIME = '{"name": "time", "arguments": {}}'
BOTH = [("get_weather", WEATHER), ("time", {})]

CASES = [
    (GraniteParser, f"<|tool_call|>[{CALL}, {TIME}]", None, BOTH),
    (GraniteParser, f"<tool_call> [{CALL}]", None, [("get_weather", WEATHER)]),  # Granite 3.1's tag
    (GraniteParser, f"[{TIME}]", None, [("time", {})]),  # the special token skipped in decoding
    (GraniteParser, "[1, 2] is a list", "[1, 2] is a list", []),
    (GraniteParser, f"Sure: [{TIME}]", f"Sure: [{TIME}]", []),  # calls are the whole output or nothing
    (JambaParser, f"Let me look. <tool_calls>[{CALL}, {TIME}]</tool_calls>", "Let me look.", BOTH),
    (JambaParser, "<tool_calls> not a list", "<tool_calls> not a list", []),
    (HunyuanA13BParser, f"<tool_calls>[{TIME}]</tool_calls>", None, [("time", {})]),
    (MinimaxParser, f"Looking.\n<tool_calls>\n{CALL}\n{TIME}\n</tool_calls>", "Looking.", BOTH),
    (MinimaxParser, "No <tool_calls> here", "No <tool_calls> here", []),
    (  # a marker in prose, then the real block
        MinimaxParser,
        f"Use <tool_calls> tags.\n<tool_calls>\n{TIME}\n</tool_calls>",
        "Use <tool_calls> tags.",
        [("time", {})],
    ),
    (  # planned inside the thinking, made after it
        MinimaxParser,
        f"<think>maybe <tool_calls>\n{CALL}\n</tool_calls> no</think>Answer.<tool_calls>\n{TIME}\n</tool_calls>",
        f"<think>maybe <tool_calls>\n{CALL}\n</tool_calls> no</think>Answer.",
        [("time", {})],
    ),
    (
        HunyuanA13BParser,
        f"<think><tool_calls>[{TIME}]</tool_calls></think>ok",
        f"<think><tool_calls>[{TIME}]</tool_calls></think>ok",
        [],
    ),
    (Phi4MiniJsonParser, f"functools[{CALL}, {TIME}]", None, BOTH),
    (Phi4MiniJsonParser, "import functools; functools.partial", "import functools; functools.partial", []),
    (
        InternLMParser,
        f'Checking.<|action_start|><|plugin|>\n{{"name": "get_weather", "parameters": {json.dumps(WEATHER)}}}'
        f"<|action_end|><|action_start|><|plugin|>\n{TIME}<|action_end|>",
        "Checking.",
        BOTH,
    ),
    (Granite20bFCParser, f"Sure. <function_call> {CALL} <function_call> {TIME}", "Sure.", BOTH),
    (LongcatParser, f"Hm.<longcat_tool_call>{CALL}</longcat_tool_call>", "Hm.", [("get_weather", WEATHER)]),
    (Ernie45Parser, f"\n\n<tool_call>\n{TIME}\n</tool_call>\n", None, [("time", {})]),
    (
        GigaChat3Parser,
        f"Checking.<|message_sep|>function call<|role_sep|>\n{CALL}",
        "Checking.",
        [("get_weather", WEATHER)],
    ),
    (GigaChat3Parser, f"<|function_call|>{TIME}", None, [("time", {})]),
    (GigaChat3Parser, "Just an answer.<|message_sep|>", "Just an answer.", []),
    (GigaChat3Parser, "A function call is a request.", "A function call is a request.", []),
    (
        SeedOssParser,
        "Let me check.<seed:tool_call>\n<function=get_weather>\n<parameter=city>\nOslo\n</parameter>\n"
        "<parameter=days>\n3\n</parameter>\n</function>\n</seed:tool_call>",
        "Let me check.",
        [("get_weather", {"city": "Oslo", "days": 3})],
    ),
]


@pytest.mark.parametrize(("parser", "text", "content", "calls"), CASES)
def test_whole_text_and_every_prefix_give_the_same_calls(parser, text, content, calls):
    assert_same_calls_however_fed(parser, text, content, calls)


@pytest.mark.parametrize("parser", sorted({case[0] for case in CASES}, key=lambda p: p.name))
def test_broken_and_cut_off_texts_never_raise_and_views_still_grow(parser):
    assert_broken_texts_agree(parser, [text for p, text, _, _ in CASES if p is parser], random.Random(11))


@pytest.mark.parametrize(
    "parser",
    [
        JambaParser,
        HunyuanA13BParser,
        MinimaxParser,
        Phi4MiniJsonParser,
        InternLMParser,
        Granite20bFCParser,
    ],
)
def test_a_strict_tool_s_frame_reads_back_as_its_call(parser):
    """call_frame's begin + arguments + end, the text a strict tool's structural tag makes the model write, is
    one call to that tool."""
    trigger, begin, end = parser(TOOLS).call_frame("get_weather")
    assert begin.startswith(trigger)
    whole = ChatOutput(tools=parser(TOOLS)).message("Sure. " + begin + json.dumps(WEATHER) + end)
    assert whole.content == "Sure." and _calls(whole) == [("get_weather", WEATHER)]


def test_vllms_other_names_read_the_formats_they_name():
    assert PARSERS["llama4_json"] is Llama3JsonParser and PARSERS["glm47"] is Glm45Parser
    assert PARSERS["llama4_pythonic"] is PythonicParser
    llama4 = ChatOutput(tools=PythonicParser(TOOLS)).message('<|python_start|>[time(), get_weather(city="Oslo")]')
    assert _calls(llama4) == [("time", {}), ("get_weather", {"city": "Oslo"})]
    glm47 = "<tool_call>get_weather<arg_key>city</arg_key><arg_value>Oslo</arg_value></tool_call><tool_call>time</tool_call>"
    assert _calls(ChatOutput(tools=Glm45Parser(TOOLS)).message(glm47)) == [
        ("get_weather", {"city": "Oslo"}),
        ("time", {}),
    ]
    assert (
        JambaParser.needs_special_tokens
        and InternLMParser.needs_special_tokens
        and PARSERS["gigachat3"].needs_special_tokens
    )
    assert not (HunyuanA13BParser.needs_special_tokens or MinimaxParser.needs_special_tokens)
    assert issubclass(LongcatParser, HermesParser) and PARSERS["granite-20b-fc"] is Granite20bFCParser
