"""The deepseek_v3, deepseek_v31, kimi_k2, glm45, qwen3_coder, pythonic and xlam tool-call parsers on texts in each model's format.

Each text is read whole and fed in every prefix and in small chunks: every view extends the one before
(content appended to, a call's name set once, its arguments extended), the streamed deltas add up to the
whole response, text before the calls stays content, a text without calls is all content, and broken
or cut-off texts never raise.
"""

from __future__ import annotations

import json
import random

import pytest

from model_optimizer.runtime.server.chat_output import ChatOutput
from model_optimizer.runtime.server.reasoning import Glm45ReasoningParser
from model_optimizer.runtime.server.tool_parser_registry import PARSERS
from model_optimizer.runtime.server.tool_parsers import ToolView
from model_optimizer.runtime.server.tool_parsers_deepseek import DeepSeekV3Parser, DeepSeekV31Parser, KimiK2Parser
from model_optimizer.runtime.server.tool_parsers_kv import Glm45Parser, Qwen3CoderParser, value_json
from model_optimizer.runtime.server.tool_parsers_pythonic import PythonicParser
from model_optimizer.runtime.server.tool_parsers_xlam import XlamParser
from tests.runtime.server.test_tool_parsers import _streamed

WEATHER = {"city": "Oslo", "unit": "c\\"}
TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "parameters": {
                "type": "object",
                "properties": {
                    "city": {"type": "string"},
                    "days": {"type": "integer"},
                    "code": {"type": "string"},
                    "scale": {"type": ["number", "null"]},
                },
            },
        },
    },
    {"type": "function", "function": {"name": "time"}},
]
TYPED = {"city": "Oslo", "days": 3, "code": "42", "scale": None, "extra": {"metric": True}, "note": "true story"}

BEGIN, CALL, SEP = "<｜tool▁calls▁begin｜>", "<｜tool▁call▁begin｜>", "<｜tool▁sep｜>"
END_CALL, END = "<｜tool▁call▁end｜>", "<｜tool▁calls▁end｜>"
K_BEGIN, K_CALL, K_ARGS = "<|tool_calls_section_begin|>", "<|tool_call_begin|>", "<|tool_call_argument_begin|>"
K_END_CALL, K_END = "<|tool_call_end|>", "<|tool_calls_section_end|>"
XLAM_CALLS = (
    '[{"name": "get_weather", "arguments": {"city": "Oslo", "unit": "c\\\\"}}, {"name": "time", "arguments": {}}]'
)


def _glm(name: str, pairs: dict[str, str]) -> str:
    args = "".join(f"<arg_key>{k}</arg_key>\n<arg_value>{v}</arg_value>\n" for k, v in pairs.items())
    return f"<tool_call>{name}\n{args}</tool_call>"


def _coder(name: str, pairs: dict[str, str]) -> str:
    args = "".join(f"<parameter={k}>\n{v}\n</parameter>\n" for k, v in pairs.items())
    return f"<tool_call>\n<function={name}>\n{args}</function>\n</tool_call>"


RAW_TYPED = {
    "city": "Oslo",
    "days": "3",
    "code": "42",
    "scale": "null",
    "extra": '{"metric": true}',
    "note": "true story",
}

CASES = [
    (  # DeepSeek-V3.1: the name before the separator, the arguments' JSON right after it
        DeepSeekV31Parser,
        f'Let me look.{BEGIN}{CALL}get_weather{SEP}{{"city": "Oslo", "unit": "c\\\\"}}{END_CALL}'
        f"{CALL}time{SEP}{{}}{END_CALL}{END}<｜end▁of▁sentence｜>",
        "Let me look.",
        [("get_weather", WEATHER), ("time", {})],
    ),
    (  # DeepSeek-V3: text, then two calls in the calls block, and the end of sentence after it
        DeepSeekV3Parser,
        f'Let me look.{BEGIN}{CALL}function{SEP}get_weather\n```json\n{{"city": "Oslo", "unit": "c\\\\"}}\n```{END_CALL}\n'
        f"{CALL}function{SEP}time\n```json\n{{}}\n```{END_CALL}{END}<｜end▁of▁sentence｜>",
        "Let me look.",
        [("get_weather", WEATHER), ("time", {})],
    ),
    (  # the outer begin marker left out
        DeepSeekV3Parser,
        f'{CALL}function{SEP}get_weather\n```json\n{{"city": "Oslo", "unit": "c\\\\"}}\n```{END_CALL}',
        None,
        [("get_weather", WEATHER)],
    ),
    (DeepSeekV3Parser, "No tools: <｜ is no marker, nor ``` json.", "No tools: <｜ is no marker, nor ``` json.", []),
    (  # Kimi-K2: each call's id, then its JSON arguments
        KimiK2Parser,
        f'Let me look.{K_BEGIN}{K_CALL}functions.get_weather:0{K_ARGS}{{"city": "Oslo", "unit": "c\\\\"}}{K_END_CALL}'
        f"{K_CALL}functions.time:1{K_ARGS}{{}}{K_END_CALL}{K_END}",
        "Let me look.",
        [("get_weather", WEATHER), ("time", {})],
    ),
    (  # the singular spelling of the section's marker
        KimiK2Parser,
        f"<|tool_call_section_begin|>{K_CALL}functions.time:0{K_ARGS}{{}}{K_END_CALL}<|tool_call_section_end|>",
        None,
        [("time", {})],
    ),
    (KimiK2Parser, "No tools: <| is no marker.", "No tools: <| is no marker.", []),
    (XlamParser, XLAM_CALLS, None, [("get_weather", WEATHER), ("time", {})]),  # xLAM: the list alone
    (  # in a fence, text on both sides
        XlamParser,
        f"Checking.\n```json\n{XLAM_CALLS}\n```\nDone.",
        "Checking.\nDone.",
        [("get_weather", WEATHER), ("time", {})],
    ),
    (XlamParser, f"<tool_call>{XLAM_CALLS}</tool_call>", None, [("get_weather", WEATHER), ("time", {})]),
    (XlamParser, f"[TOOL_CALLS] {XLAM_CALLS}", None, [("get_weather", WEATHER), ("time", {})]),
    (XlamParser, f"plan</think>\n{XLAM_CALLS}", "plan</think>", [("get_weather", WEATHER), ("time", {})]),
    (XlamParser, "[1, 2] are numbers", "[1, 2] are numbers", []),
    (XlamParser, "```json\n[1, 2]\n```", "```json\n[1, 2]\n```", []),  # a fenced list, but not of calls
    (XlamParser, "```python\nx = [1]\n```", "```python\nx = [1]\n```", []),
    (  # GLM-4.5: values typed by the schema, or read as JSON where it says nothing
        Glm45Parser,
        "I will check.\n" + _glm("get_weather", RAW_TYPED) + "\n" + _glm("time", {}),
        "I will check.",
        [("get_weather", TYPED), ("time", {})],
    ),
    (Glm45Parser, "<tool_call>time</tool_call>", None, [("time", {})]),
    (Glm45Parser, "Tags like <tool or <arg_key> alone are text.", "Tags like <tool or <arg_key> alone are text.", []),
    (  # Qwen3-Coder: the same typing; a value keeps its inner newlines
        Qwen3CoderParser,
        "Checking.\n" + _coder("get_weather", RAW_TYPED) + "\n" + _coder("time", {"script": "a = 1\nb = 2\n"}),
        "Checking.",
        [("get_weather", TYPED), ("time", {"script": "a = 1\nb = 2\n"})],
    ),
    (  # a parameter whose closing tag was left out ends where the next one begins
        Qwen3CoderParser,
        "<tool_call>\n<function=get_weather>\n<parameter=city>\nOslo\n<parameter=days>\n2\n</function>\n</tool_call>",
        None,
        [("get_weather", {"city": "Oslo", "days": 2})],
    ),
    (Qwen3CoderParser, "<function=f> is how it looks", "<function=f> is how it looks", []),
    (  # Llama 3.2 / 4: a Python list of calls, literals of every kind
        PythonicParser,
        '[get_weather(city="Oslo", unit="c\\\\"), time(), '
        "f(a=[1, (2, 3)], b={'k': None, \"n\": -1.5}, c=True, d='''x, y)''', e='it\\'s')]",
        None,
        [
            ("get_weather", WEATHER),
            ("time", {}),
            ("f", {"a": [1, [2, 3]], "b": {"k": None, "n": -1.5}, "c": True, "d": "x, y)", "e": "it's"}),
        ],
    ),
    (
        PythonicParser,
        '<|python_start|>[get_weather(city="Oslo", unit="c\\\\")]<|python_end|>',
        None,
        [("get_weather", WEATHER)],
    ),
    # a marker with no call behind it is text, as in vLLM; a name holds no space
    (Qwen3CoderParser, "Calls go in <tool_call> tags.", "Calls go in <tool_call> tags.", []),
    (Glm45Parser, "Use <tool_call> to call a tool.", "Use <tool_call> to call a tool.", []),
    (Glm45Parser, "Try <tool_call> then " + _glm("time", {}), "Try <tool_call> then", [("time", {})]),
    (Glm45Parser, "<tool_call>\n" + _glm("time", {})[len("<tool_call>") :], None, [("time", {})]),  # newline first
    (  # text the format does not expect inside a call is skipped once its end has arrived
        Glm45Parser,
        "<tool_call>get_weather\n<arg_key>city</arg_key>\n<arg_value>Oslo</arg_value>\nnote\n</tool_call>\n"
        + _glm("time", {}),
        None,
        [("get_weather", {"city": "Oslo"}), ("time", {})],
    ),
    (
        Qwen3CoderParser,
        _coder("get_weather", {"city": "Oslo"}).replace("</function>", "stray\n</function>") + _coder("time", {}),
        None,
        [("get_weather", {"city": "Oslo"}), ("time", {})],
    ),
    (  # names with dots and colons, and the id's prefix left out
        KimiK2Parser,
        f"{K_BEGIN}{K_CALL}functions.ns:get.weather:0{K_ARGS}{{}}{K_END_CALL}{K_CALL}time:1{K_ARGS}{{}}{K_END_CALL}{K_END}",
        None,
        [("ns:get.weather", {}), ("time", {})],
    ),
    (
        DeepSeekV3Parser,
        f"Hi{BEGIN}{CALL}function{SEP}time{END_CALL}{END}",
        f"Hi{BEGIN}{CALL}function{SEP}time{END_CALL}{END}",
        [],
    ),
    (PythonicParser, "The answer is [1, 2].", "The answer is [1, 2].", []),
    (PythonicParser, "[1, 2]", "[1, 2]", []),  # a list, but not of calls
    (PythonicParser, "[Oslo is cold]", "[Oslo is cold]", []),
    (PythonicParser, "[f(x={1, 2})]", "[f(x={1, 2})]", []),  # a set: no JSON for it
]


def _extends(old: ToolView, new: ToolView) -> None:
    assert new.content.startswith(old.content), (old.content, new.content)
    old_calls = [c for c in old.calls if c.name is not None]
    new_calls = [c for c in new.calls if c.name is not None]
    assert len(new_calls) >= len(old_calls)
    for a, b in zip(old_calls, new_calls):
        assert b.name == a.name and b.arguments.startswith(a.arguments), (a, b)


def _grown_views(parser, text: str) -> ToolView:
    """The final view after checking that the view of every prefix extends the one before."""
    before = ToolView()
    for k in range(len(text) + 1):
        view = parser.view(text[:k], final=False)
        _extends(before, view)
        before = view
    final = parser.view(text, final=True)
    _extends(before, final)
    return final


def _calls(message) -> list[tuple[str, dict]]:
    return [(c["function"]["name"], json.loads(c["function"]["arguments"])) for c in message.tool_calls]


@pytest.mark.parametrize(("parser", "text", "content", "calls"), CASES)
def test_whole_text_and_every_prefix_give_the_same_calls(parser, text, content, calls):
    assert_same_calls_however_fed(parser, text, content, calls)


def assert_same_calls_however_fed(parser, text: str, content: str | None, calls: list) -> None:
    """`text` read whole, view by growing view, and streamed whole, by character and in 3-character chunks:
    the same content and calls each time."""
    whole = ChatOutput(tools=parser(TOOLS)).message(text)
    assert (whole.content, _calls(whole)) == (content, calls)
    final = _grown_views(parser(TOOLS), text)
    assert [(c.name, json.loads(c.arguments)) for c in final.calls] == calls
    for pieces in ([text], list(text), [text[i : i + 3] for i in range(0, len(text), 3)]):
        got_content, _, got_calls = _streamed(ChatOutput(tools=parser(TOOLS)), pieces)
        assert got_content == (content or "")
        assert [(c["name"], json.loads(c["arguments"])) for c in got_calls] == calls


def _mutations(text: str, rng: random.Random, count: int) -> list[str]:
    """Cut, shortened and spliced copies of `text`: the broken outputs a model may write."""
    out = []
    for _ in range(count):
        a, b = sorted(rng.sample(range(len(text) + 1), 2))
        out.append(rng.choice([text[:a], text[:a] + text[b:], text[:b] + text[a:], text[:a] + "<" + text[a:]]))
    return out


@pytest.mark.parametrize(
    "parser", [DeepSeekV3Parser, KimiK2Parser, Glm45Parser, Qwen3CoderParser, PythonicParser, XlamParser]
)
def test_broken_and_cut_off_texts_never_raise_and_views_still_grow(parser):
    assert_broken_texts_agree(parser, [text for p, text, _, _ in CASES if p is parser], random.Random(7))


def assert_broken_texts_agree(parser, texts: list[str], rng: random.Random) -> None:
    """Mutated copies of `texts` never raise, views still grow, and streamed and whole readings agree."""
    for text in texts:
        for broken in _mutations(text, rng, 25):
            final = _grown_views(parser(TOOLS), broken)
            streamed = _streamed(ChatOutput(tools=parser(TOOLS)), list(broken))
            whole = ChatOutput(tools=parser(TOOLS)).message(broken)
            assert streamed[0] == (whole.content or "")
            assert [(c["name"], c["arguments"]) for c in streamed[2]] == [
                (c["function"]["name"], c["function"]["arguments"]) for c in whole.tool_calls
            ]
            assert len(whole.tool_calls) == len([c for c in final.calls if c.name])


def test_kv_arguments_stream_key_by_key_and_values_only_when_whole():
    parser = Glm45Parser(TOOLS)
    head = "<tool_call>get_weather\n<arg_key>city</arg_key>\n<arg_value>Os"
    assert parser.view(head, final=False).calls[0].arguments == '{"city": '
    with_days = head + "lo</arg_value>\n<arg_key>days</arg_key><arg_value>3</arg_value>"
    assert parser.view(with_days, final=False).calls[0].arguments == '{"city": "Oslo", "days": 3'
    done = parser.view(with_days + "</tool_call>", final=False).calls[0]
    assert (done.arguments, done.complete) == ('{"city": "Oslo", "days": 3}', True)


@pytest.mark.parametrize(
    ("raw", "schema", "expected"),
    [
        ("3", {"type": "integer"}, 3),
        ("3", {"type": "string"}, "3"),
        ("3", None, 3),
        ("null", None, "null"),  # the schema allows any string: only unmistakable values become values
        ("null", {"type": "object"}, None),
        ("{'a': (1, True)}", {"type": "object"}, {"a": [1, True]}),  # a Python literal where JSON is expected
        ("not json", {"type": "integer"}, "not json"),
        ("NaN", {"type": "number"}, "NaN"),
        ("[1, 2]", {"type": ["string", "array"]}, [1, 2]),
        ("yes", {"type": ["string", "array"]}, "yes"),
    ],
)
def test_a_raw_value_is_typed_by_its_schema(raw, schema, expected):
    assert json.loads(value_json(raw, schema)) == expected


def test_the_request_tools_reach_the_parser():
    """Without the tools, a number a string parameter holds reads as a number; with them it stays text."""
    text = _glm("get_weather", {"code": "42"})
    assert json.loads(Glm45Parser().view(text, final=True).calls[0].arguments) == {"code": 42}
    assert json.loads(Glm45Parser(TOOLS).view(text, final=True).calls[0].arguments) == {"code": "42"}


def test_glm45_reasoning_then_a_call():
    text = "<think>need the weather</think>" + _glm("get_weather", {"city": "Oslo"})
    whole = ChatOutput(Glm45ReasoningParser(), Glm45Parser(TOOLS)).message(text)
    assert whole.reasoning_content == "need the weather" and whole.content is None
    assert _calls(whole) == [("get_weather", {"city": "Oslo"})]
    content, reasoning, calls = _streamed(ChatOutput(Glm45ReasoningParser(), Glm45Parser(TOOLS)), list(text))
    assert (content, reasoning, calls[0]["arguments"]) == ("", "need the weather", '{"city": "Oslo"}')


def test_every_parser_takes_the_request_tools_and_deepseek_keeps_special_tokens():
    import typing

    from model_optimizer.runtime.server.config import ServerConfig

    [choices, _] = typing.get_args(typing.get_type_hints(ServerConfig)["tool_call_parser"])
    assert set(PARSERS) == set(typing.get_args(choices))  # the flag offers exactly the parsers there are
    assert PARSERS["qwen3_xml"] is PARSERS["qwen3_coder"]  # vLLM's newer name for the format
    for parser in PARSERS.values():
        assert parser(TOOLS).view("", final=True) == ToolView()
    assert DeepSeekV3Parser.needs_special_tokens and not Glm45Parser.needs_special_tokens


def test_kimi_calls_keep_the_models_ids_and_forced_calls_get_ids_of_its_form():
    """Kimi-K2's template writes each call's id back into the prompt as the model wrote it: the response keeps
    the model's id, and a kimi_k2 server's required and named calls get ids of the same form."""
    from model_optimizer.runtime.server.config import ServerConfig
    from model_optimizer.runtime.server.tool_parsers import RequiredParser
    from model_optimizer.runtime.server.tools import _with_server_ids

    text = f"{K_BEGIN}{K_CALL}functions.time:3{K_ARGS}{{}}{K_END_CALL}{K_END}"
    assert [c["id"] for c in ChatOutput(tools=KimiK2Parser()).message(text).tool_calls] == ["functions.time:3"]
    _, _, streamed = _streamed(ChatOutput(tools=KimiK2Parser()), list(text))
    assert [c["id"] for c in streamed] == ["functions.time:3"]
    # an id the model wrote again is not repeated: a later call gets the format's id for its place, or a random
    # one where that is taken too, so that each tool result names one call
    again = f"{K_CALL}functions.time:1{K_ARGS}{{}}{K_END_CALL}"
    text = f"{K_BEGIN}{again * 3}{K_END}"
    whole = [c["id"] for c in ChatOutput(tools=KimiK2Parser()).message(text).tool_calls]
    _, _, streamed = _streamed(ChatOutput(tools=KimiK2Parser()), list(text))
    for ids in (whole, [c["id"] for c in streamed]):
        assert ids[0] == "functions.time:1" and ids[1].startswith("call_") and ids[2] == "functions.time:2"

    class State:
        config = ServerConfig(enable_auto_tool_choice=True, tool_call_parser="kimi_k2")

    forced = _with_server_ids(State(), RequiredParser())
    message = ChatOutput(tools=forced).message('[{"name": "a", "parameters": {}}, {"name": "b", "parameters": {}}]')
    assert [c["id"] for c in message.tool_calls] == ["functions.a:0", "functions.b:1"]
