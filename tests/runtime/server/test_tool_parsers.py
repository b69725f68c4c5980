"""Tool-call and reasoning parsers on texts in each model family's format: the whole text, and the same text
fed in every possible split (streaming), give the same content, reasoning, calls and arguments."""

from __future__ import annotations

import json
import re

import pytest

from model_optimizer.runtime.server.chat_output import ChatOutput
from model_optimizer.runtime.server.reasoning import (
    CLOSED,
    OPEN,
    REASONING_PARSERS,
    DeepSeekR1ReasoningParser,
    GptOssReasoningParser,
    Qwen3ReasoningParser,
    prompt_state,
)
from model_optimizer.runtime.server.tool_parsers import (
    HermesParser,
    Llama3JsonParser,
    MistralParser,
    NamedParser,
    RequiredParser,
)
from model_optimizer.runtime.server.tool_parsers_tagged import GraniteParser

WEATHER = {"city": "Oslo", "unit": "c\\"}

CASES = [
    (  # Qwen: text, then two calls in tags
        HermesParser,
        'Let me check. <tool_call>\n{"name": "get_weather", "arguments": {"city": "Oslo", "unit": "c\\\\"}}\n</tool_call>\n'
        '<tool_call>\n{"name": "time", "arguments": {}}\n</tool_call>',
        "Let me check.",
        [("get_weather", WEATHER), ("time", {})],
    ),
    (
        HermesParser,
        "No tools needed: 2 < 3 and <tool is not a tag.",
        "No tools needed: 2 < 3 and <tool is not a tag.",
        [],
    ),
    (  # arguments written as a JSON string holding JSON
        HermesParser,
        '<tool_call>{"arguments": "{\\"city\\": \\"Oslo\\", \\"unit\\": \\"c\\\\\\\\\\"}", "name": "get_weather"}</tool_call>',
        None,
        [("get_weather", WEATHER)],
    ),
    (
        Llama3JsonParser,
        '<|python_tag|>{"name": "get_weather", "parameters": {"city": "Oslo", "unit": "c\\\\"}}; {"name": "time", "parameters": {}}',
        None,
        [("get_weather", WEATHER), ("time", {})],
    ),
    (Llama3JsonParser, 'The answer is {"a": 1}.', 'The answer is {"a": 1}.', []),
    (Llama3JsonParser, '{"a": 1}', '{"a": 1}', []),  # JSON without a call in it is the answer
    (Llama3JsonParser, '{"name": "Ada", "born": 1815}', '{"name": "Ada", "born": 1815}', []),  # nor is a name alone
    (GraniteParser, '[{"name": "Ada", "born": 1815}]', '[{"name": "Ada", "born": 1815}]', []),
    (GraniteParser, '<|tool_call|>[{"name": "time"}]', None, [("time", {})]),  # after the marker: a call
    (
        MistralParser,
        'Sure[TOOL_CALLS][{"name": "get_weather", "arguments": {"city": "Oslo", "unit": "c\\\\"}}, {"name": "time", "arguments": {}}]</s>',
        "Sure",
        [("get_weather", WEATHER), ("time", {})],
    ),
    (
        MistralParser,
        '[TOOL_CALLS]get_weather[ARGS]{"city": "Oslo", "unit": "c\\\\"}[TOOL_CALLS]time[ARGS]{}',
        None,
        [("get_weather", WEATHER), ("time", {})],
    ),
    (MistralParser, 'Sure[TOOL_CALLS]{"name": "time", "arguments": {}}', "Sure", [("time", {})]),  # no list
    (  # vLLM's v11 form without [ARGS], and a [CALL_ID] after the name
        MistralParser,
        '[TOOL_CALLS]get_weather{"city": "Oslo", "unit": "c\\\\"}[TOOL_CALLS]time[CALL_ID]a1b2c3d4e[ARGS]{}',
        None,
        [("get_weather", WEATHER), ("time", {})],
    ),
    (MistralParser, "Write [TOOL_CALLS] first.", "Write [TOOL_CALLS] first.", []),  # no call behind the marker
    (
        RequiredParser,
        '[{"name":"get_weather","parameters":{"city":"Oslo","unit":"c\\\\"}},{"name":"time","parameters":{}}]',
        None,
        [("get_weather", WEATHER), ("time", {})],
    ),
    (lambda: NamedParser("get_weather"), '{"city":"Oslo","unit":"c\\\\"}', None, [("get_weather", WEATHER)]),
]


def _streamed(output: ChatOutput, pieces: list[str]) -> tuple[str, str, list[dict]]:
    """Feed `pieces`, then finish: the concatenated content, reasoning and calls (by index) a client builds."""
    content, reasoning, calls = "", "", {}
    for delta in [output.feed(p) for p in pieces] + [output.finish()]:
        content += delta.get("content", "")
        assert delta.get("reasoning") == delta.get("reasoning_content")  # both names, one text
        reasoning += delta.get("reasoning_content", "")
        for call in delta.get("tool_calls", []):
            slot = calls.setdefault(call["index"], {"id": None, "name": None, "arguments": ""})
            if "id" in call:
                assert slot["id"] is None  # id, type and name come once
                slot.update(id=call["id"], name=call["function"]["name"])
            slot["arguments"] += call.get("function", {}).get("arguments", "")
    return content, reasoning, [calls[i] for i in sorted(calls)]


@pytest.mark.parametrize(("parser", "text", "content", "calls"), CASES)
def test_whole_and_streamed_texts_give_the_same_message(parser, text, content, calls):
    whole = ChatOutput(tools=parser()).message(text)
    assert whole.content == content
    assert [(c["function"]["name"], json.loads(c["function"]["arguments"])) for c in whole.tool_calls] == calls
    splits = [[text], list(text), [text[: len(text) // 3], text[len(text) // 3 :]]]
    for pieces in splits:
        got_content, _, got_calls = _streamed(ChatOutput(tools=parser()), pieces)
        assert got_content == (content or "")
        assert [(c["name"], c["arguments"]) for c in got_calls] == [
            (c["function"]["name"], c["function"]["arguments"]) for c in whole.tool_calls
        ]
        if parser is MistralParser:  # Mistral's templates take back only nine letters and digits
            assert all(re.fullmatch("[A-Za-z0-9]{9}", c["id"]) for c in got_calls)
        else:
            assert all(c["id"].startswith("call_") for c in got_calls)


def test_parallel_tool_calls_false_keeps_the_first_call():
    """vLLM's behaviour with tool_choice "auto": the first call the model wrote, whole and streamed."""
    text = (
        '<tool_call>{"name": "a", "arguments": {"x": 1}}</tool_call>\n'
        '<tool_call>{"name": "b", "arguments": {}}</tool_call>'
    )
    whole = ChatOutput(tools=HermesParser(), max_calls=1).message(text)
    assert [c["function"]["name"] for c in whole.tool_calls] == ["a"]
    _, _, calls = _streamed(ChatOutput(tools=HermesParser(), max_calls=1), list(text))
    assert [(c["name"], c["arguments"]) for c in calls] == [("a", '{"x": 1}')]


REASONING = [
    (Qwen3ReasoningParser, "<think>\nplan it</think>\n\nThe answer.", "\nplan it", "\n\nThe answer."),
    (lambda: Qwen3ReasoningParser(OPEN), "plan it</think>\n\nok", "plan it", "\n\nok"),  # Thinking-2507
    (lambda: Qwen3ReasoningParser(OPEN), "still thinking", "still thinking", None),
    (
        lambda: DeepSeekR1ReasoningParser(CLOSED),
        "no thinking</think>, all answer",
        None,
        "no thinking</think>, all answer",
    ),
    (Qwen3ReasoningParser, "The answer, no thinking.", None, "The answer, no thinking."),
    (Qwen3ReasoningParser, "<think>cut short", "cut short", None),
    (DeepSeekR1ReasoningParser, "plan it</think>The answer.", "plan it", "The answer."),  # <think> was in the prompt
    (DeepSeekR1ReasoningParser, "<think>plan</think>ok", "plan", "ok"),
    (DeepSeekR1ReasoningParser, "still thinking <", "still thinking <", None),
    (REASONING_PARSERS["minimax_m2"], "plan</think>\n\nok", "plan", "\n\nok"),
    (REASONING_PARSERS["step3"], "plan</think>ok", "plan", "ok"),
    (REASONING_PARSERS["kimi_k2"], "<think>plan</think>ok", "plan", "ok"),
    (REASONING_PARSERS["kimi_k2"], "plan", "plan", None),
    (
        REASONING_PARSERS["seed_oss"],
        "<seed:think>plan<seed:cot_budget_reflect>8</seed:cot_budget_reflect></seed:think>ok",
        "plan<seed:cot_budget_reflect>8</seed:cot_budget_reflect>",
        "ok",
    ),  # fmt: skip
    (REASONING_PARSERS["seed_oss"], "<think>not its tag</think>", None, "<think>not its tag</think>"),
    (REASONING_PARSERS["ernie45"], "abc\n</think>\n\n<response>\ndef\n</response>\n", "abc\n", "def\n\n"),
    (REASONING_PARSERS["ernie45"], "abc\n</think>\ndef", "abc\n", "\ndef"),
    (REASONING_PARSERS["ernie45"], "abc</think>\n<resp", "abc", "\n<resp"),  # cut short: not the tag yet, text
    (REASONING_PARSERS["ernie45"], "a</think><response>b</response>\n<tool_call>", "a", "b\n<tool_call>"),
    (  # Kimi-K2-Thinking begins its calls without closing the block: they are the content's
        REASONING_PARSERS["kimi_k2"],
        "<think>plan<|tool_calls_section_begin|><|tool_call_begin|>x",
        "plan",
        "<|tool_calls_section_begin|><|tool_call_begin|>x",
    ),
    (REASONING_PARSERS["minimax_m2_append_think"], "plan</think>ok", None, "<think>plan</think>ok"),
]


@pytest.mark.parametrize(("parser", "text", "reasoning", "content"), REASONING)
def test_reasoning_is_split_whole_and_streamed(parser, text, reasoning, content):
    whole = ChatOutput(reasoning=parser()).message(text)
    assert (whole.reasoning_content, whole.content) == (reasoning, content)
    for pieces in ([text], list(text)):
        got_content, got_reasoning, _ = _streamed(ChatOutput(reasoning=parser()), pieces)
        assert (got_reasoning, got_content) == (reasoning or "", content or "")


@pytest.mark.parametrize(
    ("prompt", "state", "after"),
    [
        ("<|im_start|>assistant\n<think>\n", OPEN, ""),
        ("<|im_start|>assistant\n<think>\n\n</think>\n\n", CLOSED, ""),
        ("<|im_start|>assistant\n", "", ""),
        ("<think>a</think>old turn<|im_end|>\n<|im_start|>assistant\n", "", ""),  # an earlier turn's block
        ("<think>a</think>old turn<|im_end|>\n<|im_start|>assistant\n<think>", OPEN, ""),
        (None, "", ""),
        # the user asks about the tag: text, not a block (only what follows the last user message counts)
        ("user\nWhat does <think> do?<|im_end|>\n<|im_start|>assistant\n", "", "What does <think> do?"),
        ("user\nWhat does <think> do?<|im_end|>\n<|im_start|>assistant\n<think>\n", OPEN, "What does <think> do?"),
        ("user\nq<|im_end|>\n<|im_start|>assistant\n<think>\nI will", OPEN, "q"),  # a prefill in its block
        ("user\nq<|im_end|>\n<|im_start|>assistant\n<think>x</think>\n", CLOSED, "q"),
        ("user\n<think> in a template that rewrote it\n<|im_start|>assistant\n", "", "not in the prompt"),
        # a short message also occurs inside the tags after it: that is not where it ended
        ("user\nhi<|im_end|>\n<|im_start|>assistant\n<think>\n", OPEN, "hi"),
        ("user\nhi<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n", CLOSED, "hi"),
        ("user\nthink<|im_end|>\n<|im_start|>assistant\n<think>\n", OPEN, "think"),
        ("user\nk>\n<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n", CLOSED, "k>\n"),
    ],
)
def test_the_prompt_says_whether_the_output_starts_in_a_block(prompt, state, after):
    assert prompt_state(prompt, after=after) == state


def test_every_reasoning_parser_s_stream_adds_up_to_its_whole_split():
    """Random texts of tags and text fed in random slices: the streamed reasoning and content are the whole
    message's, for every parser and prompt state (views only grow)."""
    import random

    rng = random.Random(3)
    pieces = ["<think>", "</think>", "<seed:think>", "</seed:think>", "[THINK]", "[/THINK]", "<response>",
              "<|channel|>analysis<|message|>", "<|end|>", "<|start|>assistant<|channel|>final<|message|>",
              "<|tool_calls_section_begin|>", "<|tool_call_section_begin|>",
              "</response>", "\n", " ", "ab", "<", "</", "think", ">", "</think>\n", "\n<response>\n"]  # fmt: skip
    for _ in range(3000):
        name, state = rng.choice(sorted(REASONING_PARSERS)), rng.choice(["", OPEN, CLOSED])
        text = "".join(rng.choice(pieces) for _ in range(rng.randint(1, 10)))
        whole = ChatOutput(reasoning=REASONING_PARSERS[name](state)).message(text)
        cuts, i = [], 0
        while i < len(text):
            step = rng.randint(1, 4)
            cuts.append(text[i : i + step])
            i += step
        content, reasoning, _ = _streamed(ChatOutput(reasoning=REASONING_PARSERS[name](state)), cuts)
        assert (reasoning, content) == (whole.reasoning_content or "", whole.content or ""), (name, state, text)


def test_the_flag_offers_exactly_the_reasoning_parsers_there_are():
    import typing

    from model_optimizer.runtime.server.config import ServerConfig

    [choices, _] = typing.get_args(typing.get_type_hints(ServerConfig)["reasoning_parser"])
    assert set(REASONING_PARSERS) == set(typing.get_args(choices))
    append = REASONING_PARSERS["minimax_m2_append_think"]()
    assert append.constraint_tags() == ("", "</think>") and append.count_tokens("a</think>b", [1, 2, 3], list) == 0


def test_where_a_constraint_starts_follows_the_parsers_rule():
    """(reasoning_start, reasoning_end) of the constraint: none when the prompt closed the block, the end
    alone when the output starts inside one, both when the model may open one."""
    assert Qwen3ReasoningParser().constraint_tags() == ("<think>", "</think>")
    assert Qwen3ReasoningParser(OPEN).constraint_tags() == ("", "</think>")
    v31 = REASONING_PARSERS["deepseek_v3"]  # DeepSeek-V3.1: its template opens or closes the block by `thinking`
    assert v31(OPEN).split("plan</think>ok", True) == ("plan", "ok")
    assert v31(CLOSED).split("ok", True) == ("", "ok") and v31().constraint_tags() == ("<think>", "</think>")
    assert DeepSeekR1ReasoningParser().constraint_tags() == ("", "</think>")
    assert (
        DeepSeekR1ReasoningParser(CLOSED).constraint_tags()
        == Qwen3ReasoningParser(CLOSED).constraint_tags()
        == ("", "")
    )


def _tag_tokens(text: str) -> list[int]:
    """A tokenizer with the tags as tokens 1 and 2, every other character its own token."""
    ids: list[int] = []
    for piece in re.split(r"(</?think>)", text):
        ids += [{"<think>": 1, "</think>": 2}[piece]] if piece in ("<think>", "</think>") else [ord(c) for c in piece]
    return ids


@pytest.mark.parametrize(
    ("parser", "text", "count"),
    [
        (Qwen3ReasoningParser, "<think>abc</think>ok", 3),
        (Qwen3ReasoningParser, "<think>abcd", 4),  # cut short: all of it thinking
        (Qwen3ReasoningParser, "no block", 0),
        (lambda: Qwen3ReasoningParser(CLOSED), "<think>abc</think>ok", 0),  # the prompt closed it: all answer
        (lambda: Qwen3ReasoningParser(OPEN), "abc</think>ok", 3),
        (DeepSeekR1ReasoningParser, "abc</think>ok", 3),
        (DeepSeekR1ReasoningParser, "<think>ab</think>ok", 2),  # the prompt's <think> written again
        (DeepSeekR1ReasoningParser, "abc<think>de</think>ok", 6),  # a <think> inside it is reasoning too
        (lambda: Qwen3ReasoningParser(OPEN), "abcdefghij<think><think>", 12),
    ],
)
def test_reasoning_tokens_are_those_between_the_tags(parser, text, count):
    assert parser().count_tokens(text, _tag_tokens(text), _tag_tokens) == count


def test_reasoning_tokens_of_a_tag_merged_into_its_neighbours_are_counted_from_the_text():
    """The output's tokens spell `</think>` otherwise than the tag alone encodes (here: char by char), so the
    reasoning text is encoded again."""
    text = "<think>abc</think>ok"
    chars = [ord(c) for c in text]
    assert Qwen3ReasoningParser().count_tokens(text, chars, _tag_tokens) == 3


def test_under_a_constraint_the_whitespace_before_the_answer_is_not_content():
    """The grammar lets the model write up to 4 whitespace characters between </think> and the constrained
    answer (Qwen3 writes two newlines there): they are left out of the content, so a choice is the choice,
    streamed as whole; a fifth is the answer's own."""
    parser = Qwen3ReasoningParser()
    parser.constrained()
    assert parser.split("<think>hm</think>\n\nyes", final=True) == ("hm", "yes")
    assert parser.split("<think>hm</think>\n\n", final=False) == ("hm", "")
    assert parser.split("<think>hm</think>\n\n\r  no", final=True) == ("hm", " no")
    assert Qwen3ReasoningParser().split("<think>hm</think>\n\nyes", final=True) == ("hm", "\n\nyes")


def test_under_a_constraint_kimis_tool_section_inside_the_thinking_stays_reasoning():
    """A constraint's grammar ends the thinking at </think> alone: the split follows it, so the constrained
    answer after </think> is the content (the required calls), not the tool section before it."""
    from model_optimizer.runtime.server.reasoning import OPEN
    from model_optimizer.runtime.server.tool_parsers import NamedParser, RequiredParser

    parser = REASONING_PARSERS["kimi_k2"](OPEN)
    assert parser.constrained() == ("", "</think>")
    text = 'hmm <|tool_calls_section_begin|>x<|tool_calls_section_end|></think>\n[{"name":"f","parameters":{"a":1}}]'
    whole = ChatOutput(parser, RequiredParser()).message(text)
    assert whole.reasoning_content.startswith("hmm <|tool_calls_section_begin|>")
    assert [(c["function"]["name"], json.loads(c["function"]["arguments"])) for c in whole.tool_calls] == [
        ("f", {"a": 1})
    ]
    unconstrained = REASONING_PARSERS["kimi_k2"](OPEN)
    assert ChatOutput(unconstrained).message(text).content.startswith("<|tool_calls_section_begin|>")
    # a named choice streams its arguments as the whole message has them, trailing whitespace dropped
    _, _, calls = _streamed(ChatOutput(tools=NamedParser("f")), list('{"a": 1}\n '))
    assert (
        ChatOutput(tools=NamedParser("f")).message('{"a": 1}\n ').tool_calls[0]["function"]["arguments"] == '{"a": 1}'
    )
    assert [c["arguments"] for c in calls] == ['{"a": 1}']


def test_include_reasoning_false_sends_none():
    output = ChatOutput(Qwen3ReasoningParser(), include_reasoning=False)
    assert output.message("<think>plan</think>ok").reasoning_content is None
    content, reasoning, _ = _streamed(
        ChatOutput(Qwen3ReasoningParser(), include_reasoning=False), list("<think>p</think>ok")
    )
    assert (content, reasoning) == ("ok", "")


def test_reasoning_then_a_tool_call():
    text = '<think>need weather</think>\n<tool_call>{"name": "get_weather", "arguments": {"city": "Oslo"}}</tool_call>'
    output = ChatOutput(Qwen3ReasoningParser(), HermesParser())
    whole = output.message(text)
    assert whole.reasoning_content == "need weather" and whole.content is None
    assert whole.tool_calls[0]["function"]["arguments"] == '{"city": "Oslo"}'
    content, reasoning, calls = _streamed(ChatOutput(Qwen3ReasoningParser(), HermesParser()), list(text))
    assert (content, reasoning, calls[0]["arguments"]) == ("", "need weather", '{"city": "Oslo"}')


def test_a_call_streams_its_arguments_as_they_arrive():
    output = ChatOutput(tools=HermesParser())
    assert output.feed("<tool_call>{") == {}
    first = output.feed('"name": "f", "arguments": {"a": ')
    assert first["tool_calls"][0]["function"] == {"name": "f", "arguments": '{"a": '}
    assert output.feed("12")["tool_calls"][0] == {"index": 0, "function": {"arguments": "12"}}
    assert output.feed("}}</tool_call>")["tool_calls"][0]["function"]["arguments"] == "}"
    assert output.finish() == {}


def test_a_call_without_a_name_before_a_named_one_streams_as_the_whole_response():
    """A hermes object without a name is no call: the named one after it is call 0, streamed and not."""
    text = '<tool_call>{"x": 1}</tool_call><tool_call>{"name": "f", "arguments": {}}</tool_call>'
    whole = ChatOutput(tools=HermesParser()).message(text)
    _, _, calls = _streamed(ChatOutput(tools=HermesParser()), list(text))
    assert (
        [(c["name"], c["arguments"]) for c in calls]
        == [("f", "{}")]
        == [(c["function"]["name"], c["function"]["arguments"]) for c in whole.tool_calls]
    )


@pytest.mark.parametrize("name", ["get_weather", "查询天气", "ns:tool/v1.2-b"])
def test_tool_names_of_any_script_are_taken(name):
    from model_optimizer.runtime.server.protocol_structured import FunctionDefinition

    assert FunctionDefinition(name=name).name == name


@pytest.mark.parametrize("name", ["", "a b", "x<y", 'q"'])
def test_tool_names_a_call_format_cannot_carry_are_refused(name):
    from pydantic import ValidationError

    from model_optimizer.runtime.server.protocol_structured import FunctionDefinition

    with pytest.raises(ValidationError):
        FunctionDefinition(name=name)


BAD_ESCAPE = '<tool_call>{"name": "f", "arguments": "\\q"}</tool_call>'


@pytest.mark.parametrize(
    ("text", "content", "calls"),
    [
        ("Hi <tool_call>hello world</tool_call> bye", "Hi <tool_call>hello world</tool_call> bye", []),
        ('<tool_call>{"name": 5}</tool_call>', '<tool_call>{"name": 5}</tool_call>', []),  # no name: text
        ('<tool_call>{"name": "f"}</tool_call>', None, [("f", "{}")]),  # no arguments: none
        (BAD_ESCAPE, None, [("f", "\\q")]),  # not a JSON string: its characters, still text
        ('<tool_call>{"name": "f", "arguments": {"a": 1}, "name": "g"}</tool_call>', None, [("f", '{"a": 1}')]),
        (  # a marker inside an argument string starts no call; the next real one is found
            '<tool_call>{"name": "f", "arguments": {"s": "<tool_call>"}}</tool_call>\n'
            '<tool_call>{"name": "g", "arguments": {}}</tool_call>',
            None,
            [("f", '{"s": "<tool_call>"}'), ("g", "{}")],
        ),
        ('x <tool_call> y <tool_call>{"name": "f", "arguments": {}}</tool_call>', "x <tool_call> y", [("f", "{}")]),
    ],
)
def test_hermes_reads_what_is_a_call_and_leaves_the_rest_as_text(text, content, calls):
    whole = ChatOutput(tools=HermesParser()).message(text)
    assert whole.content == content
    assert [(c["function"]["name"], c["function"]["arguments"]) for c in whole.tool_calls] == calls
    for pieces in ([text], list(text)):
        got_content, _, got_calls = _streamed(ChatOutput(tools=HermesParser()), pieces)
        assert (got_content, [(c["name"], c["arguments"]) for c in got_calls]) == (content or "", calls)


FRAGMENTS = [
    "<tool_call>", "</tool_call>", "{", "}", "[", "]", '"name"', ":", '"f"', ",", '"arguments"', '"parameters"',
    '{"a":1}', '"\\q"', '"\\"x\\""', " ", "\n", "hi", "5", "<think>", "</think>", "<|python_tag|>", ";",
    "[TOOL_CALLS]", "[ARGS]", "f(", "a=1", ")", "<｜tool▁calls▁begin｜>", "<｜tool▁call▁begin｜>", "function",
    "<｜tool▁sep｜>", "```json\n", "```", "<｜tool▁call▁end｜>", "<｜tool▁calls▁end｜>", "<arg_key>", "</arg_key>",
    "<arg_value>", "</arg_value>", "<function=f>", "<parameter=a>", "</parameter>", "</function>", "é", '"', "\\",
    "<|tool_calls_section_begin|>", "<|tool_call_begin|>", "functions.f:0", "<|tool_call_argument_begin|>",
    "<|tool_call_end|>", "<|tool_calls_section_end|>", "<|tool_call_section_begin|>", "```json", "\n```\n",
    "<tool_calls>", "</tool_calls>", "<|tool_call|>", "functools[", "<function_call>", "<|action_start|><|plugin|>",
    "<|action_end|>", "<longcat_tool_call>", "<seed:tool_call>", "</seed:tool_call>", "<|start|>assistant",
    "<|channel|>analysis", "<|channel|>final", " to=functions.f", "<|message|>", "<|end|>", "<|call|>",
]  # fmt: skip


CALL_FRAMES = {
    "hermes": ('<tool_call>{"name":"f","arguments":', "}</tool_call>"),
    "llama3_json": ('{"name":"f","parameters":', "}"),
    "mistral": ('[TOOL_CALLS][{"name":"f","arguments":', "}]"),
    "pythonic": ("[f(", ")]"),
    "deepseek_v3": (
        "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>f\n```json\n",
        "\n```<｜tool▁call▁end｜><｜tool▁calls▁end｜>",
    ),
    "deepseek_v31": (
        "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>f<｜tool▁sep｜>",
        "<｜tool▁call▁end｜><｜tool▁calls▁end｜>",
    ),
    "glm45": ("<tool_call>f\n<arg_key>a</arg_key><arg_value>", "</arg_value></tool_call>"),
    "qwen3_coder": ("<tool_call>\n<function=f>\n<parameter=a>\n", "\n</parameter>\n</function>\n</tool_call>"),
    "kimi_k2": (
        "<|tool_calls_section_begin|><|tool_call_begin|>functions.f:0<|tool_call_argument_begin|>",
        "<|tool_call_end|><|tool_calls_section_end|>",
    ),
    "xlam": ('```json\n[{"name":"f","arguments":', "}]\n```"),
    "granite": ('<|tool_call|>[{"name":"f","arguments":', "}]"),
    "granite-20b-fc": ('<function_call> {"name":"f","arguments":', "}"),
    "jamba": ('<tool_calls>[{"name":"f","arguments":', "}]</tool_calls>"),
    "hunyuan_a13b": ('<tool_calls>[{"name":"f","arguments":', "}]</tool_calls>"),
    "minimax": ('<tool_calls>\n{"name":"f","arguments":', "}\n</tool_calls>"),
    "phi4_mini_json": ('functools[{"name":"f","arguments":', "}]"),
    "internlm": ('<|action_start|><|plugin|>{"name":"f","parameters":', "}<|action_end|>"),
    "longcat": ('<longcat_tool_call>{"name":"f","arguments":', "}</longcat_tool_call>"),
    "ernie45": ('<tool_call>{"name":"f","arguments":', "}</tool_call>"),
    "seed_oss": ("<seed:tool_call>\n<function=f>\n<parameter=a>\n", "\n</parameter>\n</function>\n</seed:tool_call>"),
    "gigachat3": ('<|message_sep|>function call<|role_sep|>\n{"name":"f","arguments":', "}"),
    "openai": ("<|start|>assistant<|channel|>commentary to=functions.f <|constrain|>json<|message|>", "<|call|>"),
}
"""Each format's call around random pieces: texts that reach deep into the parsers."""
ALIASES = {"qwen3_xml": "qwen3_coder", "llama4_json": "llama3_json", "llama4_pythonic": "pythonic", "glm47": "glm45"}
"""vLLM's other names for formats above."""


def test_streamed_deltas_add_up_to_the_whole_message_for_any_text():
    """Random texts of every format's pieces, fed in random slices to every parser (with and without a
    reasoning parser): the deltas always concatenate to the whole response, which never fails."""
    import random

    from model_optimizer.runtime.server.tool_parser_registry import PARSERS

    rng = random.Random(0)
    tools = [{"type": "function", "function": {"name": "f", "parameters": {"properties": {"a": {"type": "integer"}}}}}]
    for _ in range(6000):
        name = rng.choice(sorted(PARSERS))
        parser = PARSERS[name]
        text = "".join(rng.choice(FRAGMENTS) for _ in range(rng.randint(1, 14)))
        if rng.random() < 0.5:
            head, tail = CALL_FRAMES[ALIASES.get(name, name)]
            text = text[: len(text) // 3] + head + text[len(text) // 3 :] + tail
        reasoning = rng.choice([None, Qwen3ReasoningParser, DeepSeekR1ReasoningParser, GptOssReasoningParser])

        def output(parser=parser, reasoning=reasoning):
            return ChatOutput(reasoning() if reasoning else None, parser(tools))

        whole = output().message(text)
        pieces, i = [], 0
        while i < len(text):
            step = rng.randint(1, 4)
            pieces.append(text[i : i + step])
            i += step
        content, thought, calls = _streamed(output(), pieces)
        assert (content, thought) == (whole.content or "", whole.reasoning_content or ""), (parser.name, text)
        wanted = [(c["function"]["name"], c["function"]["arguments"]) for c in whole.tool_calls]
        assert [(c["name"], c["arguments"]) for c in calls] == wanted, (parser.name, text)
        assert all(isinstance(arguments, str) for _, arguments in wanted)


TREE = {
    "type": "object",
    "properties": {"v": {"type": "integer"}, "kids": {"type": "array", "items": {"$ref": "#"}}},
    "required": ["v", "kids"],
    "additionalProperties": False,
}
POINTER = {
    "type": "object",
    "properties": {"a": {"type": "integer", "maximum": 9}, "b": {"$ref": "#/properties/a"}},
    "required": ["a", "b"],
    "$defs": {"unused": {"type": "string"}},
}
IDENTIFIED = {  # a document with its own $id (JSON Schema generators write one) and old-style definitions
    "$id": "https://example.com/p.json",
    "$schema": "http://json-schema.org/draft-07/schema#",
    "type": "object",
    "properties": {"a": {"$ref": "#/definitions/A"}},
    "definitions": {"A": {"type": "integer"}},
    "required": ["a"],
}
THROUGH_OWN_ID = {  # references written through the schema's own $id (a draft-07 one ends in #)
    "$id": "https://example.com/s.json#",
    "type": "object",
    "properties": {
        "x": {"$ref": "https://example.com/s.json#/$defs/X"},
        "me": {"$ref": "https://example.com/s.json"},
        "default": {"$ref": "https://example.com/s.json#/$defs/X"},  # a property named as a keyword
    },
    "required": ["x"],
    "$defs": {"X": {"enum": ["z"]}},
}


NAMED_PARAMETERS = {  # a definition named like the slot the parameters take under the root
    "type": "object",
    "properties": {"p": {"$ref": "#/$defs/parameters"}},
    "required": ["p"],
    "$defs": {"parameters": {"type": "object", "properties": {"k": {"type": "integer"}}, "required": ["k"]}},
}
BOTH_KINDS = {  # 2019-09's $defs and draft 7's definitions, one name in each
    "type": "object",
    "properties": {"a": {"$ref": "#/$defs/X"}, "b": {"$ref": "#/definitions/X"}},
    "required": ["a", "b"],
    "$defs": {"X": {"enum": ["s"]}},
    "definitions": {"X": {"enum": [7]}},
}
DATA_AND_NAMES = {  # a $ref inside data is text; a property named $ref is a schema like any other
    "type": "object",
    "properties": {"c": {"const": {"$ref": "#/x"}}, "$ref": {"$ref": "#/$defs/S"}},
    "required": ["c", "$ref"],
    "$defs": {"S": {"type": "string"}},
}
ANY_OF_ROOT = {"anyOf": [{"properties": {"a": {"type": "integer"}}, "required": ["a"]}, {"type": "string"}]}


@pytest.mark.parametrize(
    ("parameters", "good", "bad"),
    [
        (TREE, {"v": 1, "kids": [{"v": 2, "kids": []}]}, {"v": 1, "kids": [{"v": "x", "kids": []}]}),
        (POINTER, {"a": 1, "b": 2}, {"a": 1, "b": 12}),
        (IDENTIFIED, {"a": 1}, {"a": "x"}),
        (THROUGH_OWN_ID, {"x": "z", "me": {"x": "z"}, "default": "z"}, {"x": "z", "default": "y"}),
        (NAMED_PARAMETERS, {"p": {"k": 1}}, {"p": {"p": {"k": 1}}}),
        (BOTH_KINDS, {"a": "s", "b": 7}, {"a": 7, "b": 7}),
        (DATA_AND_NAMES, {"c": {"$ref": "#/x"}, "$ref": "s"}, {"c": {"$ref": "#/x"}, "$ref": 1}),
        (ANY_OF_ROOT, {"a": 1}, "a string"),  # arguments are an object, whatever the root allows
    ],
    ids=[
        "root-self-reference",
        "pointer-into-itself",
        "own-id",
        "refs-through-own-id",
        "def-named-parameters",
        "defs-and-definitions",
        "ref-in-data-and-names",
        "any-of-root",
    ],  # fmt: skip
)
def test_required_calls_keep_a_tools_references_into_its_own_schema(parameters, good, bad):
    """tool_choice "required" moves each tool's parameters under the root's $defs: `#` and `#/...`
    references must follow them there (jsonschema, no engine: the schema's meaning is the point)."""
    import jsonschema

    from model_optimizer.runtime.server.protocol_structured import ChatTool
    from model_optimizer.runtime.server.tools import _calls_schema

    tools = [ChatTool.model_validate({"function": {"name": n, "parameters": parameters}}) for n in ("t", "u")]
    schema = _calls_schema(tools, parallel=True)
    jsonschema.validate([{"name": "u", "parameters": good}, {"name": "t", "parameters": good}], schema)
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate([{"name": "u", "parameters": bad}], schema)


def test_strict_tools_frame_calls_only_in_formats_that_can():
    """tool_choice auto constrains calls only when a tool is strict and the format frames a JSON call."""
    from model_optimizer.runtime.server.protocol_structured import ChatTool
    from model_optimizer.runtime.server.tool_parsers_kv import Glm45Parser
    from model_optimizer.runtime.server.tools import _strict_calls

    def tools(strict):
        return [
            ChatTool.model_validate({"function": {"name": "a", "parameters": TREE, "strict": strict}}),
            ChatTool.model_validate({"function": {"name": "b"}}),
        ]

    assert _strict_calls(tools(False), HermesParser()) is None
    assert _strict_calls(tools(True), Glm45Parser()) is None  # its arguments are not JSON
    so = _strict_calls(tools(True), HermesParser())
    spec = json.loads(so.spec)
    assert spec["triggers"] == ["<tool_call>"] and so.whitespace_flexible
    assert [s["schema"] for s in spec["structures"]] == [TREE, {"type": "object"}]
    assert spec["structures"][0]["begin"] == '<tool_call>\n{"name": "a", "arguments": '


def test_a_forced_call_cut_off_before_it_began_has_null_content():
    """tool_choice required or named: the output is nothing but calls, so content is null whether or not
    a call had begun when max_tokens cut it (it was "" before any call, null after)."""
    from model_optimizer.runtime.server.tool_parsers import NamedParser, RequiredParser

    for parser in (RequiredParser(), NamedParser("f")):
        for text in ("", " ", '[{"name": "f", "para'):
            assert ChatOutput(tools=parser).message(text).content is None


def test_forced_calls_take_the_ids_of_the_servers_parser():
    """A mistral server's required and named calls get Mistral's nine-character ids too."""
    from model_optimizer.runtime.server.config import ServerConfig
    from model_optimizer.runtime.server.tool_parsers import NamedParser, RequiredParser
    from model_optimizer.runtime.server.tools import _with_server_ids

    class State:
        config = ServerConfig(enable_auto_tool_choice=True, tool_call_parser="mistral")

    for parser in (RequiredParser(), NamedParser("f")):
        assert re.fullmatch("[A-Za-z0-9]{9}", _with_server_ids(State(), parser).call_id("f", 0))
    assert RequiredParser().call_id("f", 0).startswith("call_")


def test_definitions_that_are_not_an_object_are_a_400():
    from model_optimizer.runtime.server.errors import APIError
    from model_optimizer.runtime.server.protocol_structured import ChatTool
    from model_optimizer.runtime.server.tools import _calls_schema

    tool = ChatTool.model_validate({"function": {"name": "f", "parameters": {"type": "object", "$defs": ["x"]}}})
    with pytest.raises(APIError, match=r"parameters.\$defs must be an object") as raised:
        _calls_schema([tool], parallel=True)
    assert raised.value.status_code == 400 and raised.value.param == "tools"


def test_no_parameters_is_no_arguments_and_the_empty_schema_any():
    """A function without `parameters` takes none (OpenAI's reading); `"parameters": {}` is JSON Schema's
    empty schema: any arguments object, as vLLM constrains it."""
    import jsonschema

    from model_optimizer.runtime.server.protocol_structured import ChatTool
    from model_optimizer.runtime.server.tools import _calls_schema

    bare = _calls_schema([ChatTool.model_validate({"function": {"name": "f"}})], parallel=True)
    empty = _calls_schema([ChatTool.model_validate({"function": {"name": "f", "parameters": {}}})], parallel=True)
    jsonschema.validate([{"name": "f", "parameters": {}}], bare)
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate([{"name": "f", "parameters": {"a": 1}}], bare)
    jsonschema.validate([{"name": "f", "parameters": {"a": 1}}], empty)
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate([{"name": "f", "parameters": [1]}], empty)
