"""OpenAI's custom tools (`{"type": "custom", "custom": {"name", "format"}}`) through the live server.

A custom tool's input is text (free, or in a Lark or regex grammar). Named in tool_choice, the whole output
is the input, constrained by its grammar; the model sees the tool as a function of one string, `input`
(protocol_structured._as_function), so `auto` and `required` calls carry `{"input": "..."}`.
"""

from __future__ import annotations

import json
import re

import httpx
import openai
import pytest

from model_optimizer.runtime.engine.detokenizer import TokenTexts
from model_optimizer.runtime.engine.outputs import CompletionOutput
from model_optimizer.runtime.server.chat_format import ChatFormat
from model_optimizer.runtime.server.chat_output import ChatOutput
from model_optimizer.runtime.server.protocol_chat import ChatCompletionRequest
from model_optimizer.runtime.server.tool_parsers import HermesParser
from model_optimizer.runtime.server.tools import ToolPlan, as_template_tools
from tests.runtime.server.test_structured_outputs import USER, start_tools_server

ORDER_ID = "[A-Z]{3}-[0-9]{4}"
REGEX_TOOL = {
    "type": "custom",
    "custom": {
        "name": "lookup",
        "description": "Look an order up.",
        "format": {"type": "grammar", "grammar": {"syntax": "regex", "definition": ORDER_ID}},
    },
}
SQL = 'start: "SELECT " COL " FROM t"\nCOL: /[a-z]{1,8}/'
LARK_TOOL = {
    "type": "custom",
    "custom": {"name": "sql", "format": {"type": "grammar", "grammar": {"syntax": "lark", "definition": SQL}}},
}
TEXT_TOOL = {"type": "custom", "custom": {"name": "note", "format": {"type": "text"}}}
FUNCTION_TOOL = {
    "type": "function",
    "function": {"name": "add", "parameters": {"type": "object", "properties": {"a": {"type": "integer"}}}},
}


@pytest.fixture(scope="module")
def live(tiny_model, tmp_path_factory):
    server = start_tools_server(tiny_model, tmp_path_factory, 256, 16, tool_call_parser="hermes")
    yield server
    server.stop()


@pytest.fixture(scope="module")
def client(live):
    return openai.OpenAI(base_url=live.url + "/v1", api_key="unused", max_retries=0)


def named(tool: dict) -> dict:
    return {"type": "custom", "custom": {"name": tool["custom"]["name"]}}


QUESTION_LARK_TOOL = {  # a rule written `?start:` is Lark, though it reads as no GBNF either
    "type": "custom",
    "custom": {"name": "yes_no", "format": {"type": "grammar", "grammar": {"syntax": "lark",
                                                                           "definition": '?start: "yes" | "no"'}}},
}  # fmt: skip


@pytest.mark.parametrize(
    ("tool", "shape"),
    [(REGEX_TOOL, ORDER_ID), (LARK_TOOL, "SELECT [a-z]{1,8} FROM t"), (QUESTION_LARK_TOOL, "yes|no")],
)
def test_a_named_custom_tool_writes_its_input_in_its_grammar(client, tool, shape):
    completion = client.chat.completions.create(
        model="tiny", messages=USER, tools=[tool, FUNCTION_TOOL], tool_choice=named(tool), n=3, temperature=1.0, seed=2
    )
    for choice in completion.choices:
        [call] = choice.message.tool_calls
        assert call.type == "custom" and call.custom.name == tool["custom"]["name"] and call.id
        assert re.fullmatch(shape, call.custom.input), call.custom.input
        assert choice.finish_reason == "stop" and choice.message.content is None  # as a forced function


def test_a_streamed_custom_call_adds_up_to_the_whole_one(client):
    kwargs = dict(model="tiny", messages=USER, tools=[REGEX_TOOL], tool_choice=named(REGEX_TOOL), temperature=0)
    whole = client.chat.completions.create(**kwargs).choices[0].message.tool_calls[0]
    pieces, kinds, ids = [], set(), set()
    for chunk in client.chat.completions.create(**kwargs, stream=True):
        for delta in chunk.choices[0].delta.tool_calls or [] if chunk.choices else []:
            kinds.add(delta.type)
            ids.add(delta.id)
            custom = delta.model_extra.get("custom") or {}
            pieces.append(custom.get("input", ""))
    assert kinds == {"custom", None} and len(ids - {None}) == 1
    assert "".join(pieces) == whole.custom.input and re.fullmatch(ORDER_ID, whole.custom.input)


def test_required_calls_give_custom_inputs_in_their_regex(client):
    completion = client.chat.completions.create(
        model="tiny", messages=USER, tools=[REGEX_TOOL, TEXT_TOOL], tool_choice="required", n=3, temperature=1.0, seed=5
    )
    for choice in completion.choices:
        assert choice.finish_reason == "tool_calls" and choice.message.tool_calls
        for call in choice.message.tool_calls:
            assert call.type == "custom" and isinstance(call.custom.input, str)
            if call.custom.name == "lookup":
                assert re.fullmatch(ORDER_ID, call.custom.input), call.custom.input


def test_custom_calls_sent_back_reach_the_template(client):
    call = {"id": "call_1", "type": "custom", "custom": {"name": "lookup", "input": "ABC-1234"}}
    history = USER + [
        {"role": "assistant", "content": None, "tool_calls": [call]},
        {"role": "tool", "tool_call_id": "call_1", "content": "shipped"},
    ]
    without = client.chat.completions.create(model="tiny", messages=USER, tools=[REGEX_TOOL], max_tokens=1)
    answered = client.chat.completions.create(model="tiny", messages=history, tools=[REGEX_TOOL], max_tokens=1)
    assert answered.usage.prompt_tokens > without.usage.prompt_tokens + 8  # the call's name and input rendered


BAD_LARK_TOOL = {
    "type": "custom",
    "custom": {
        "name": "broken",
        "format": {"type": "grammar", "grammar": {"syntax": "lark", "definition": "start: x"}},
    },
}


@pytest.mark.parametrize(
    ("extra", "words"),
    [
        ({"tools": [{"type": "custom"}]}, 'needs "custom"'),
        ({"tools": [{"type": "custom", "custom": {"name": "x", "format": {"type": "grammar"}}}]}, "holds a grammar"),
        ({"tools": [FUNCTION_TOOL], "tool_choice": named({"custom": {"name": "add"}})}, "as a custom tool"),
        ({"tools": [REGEX_TOOL], "tool_choice": {"type": "function", "function": {"name": "lookup"}}}, "as a function"),
        ({"tools": [LARK_TOOL], "tool_choice": "required"}, "Lark grammar"),
        (
            {
                "tools": [
                    {
                        **LARK_TOOL,
                        "custom": {
                            **LARK_TOOL["custom"],
                            "format": {"type": "grammar", "grammar": {"syntax": "regex", "definition": "(("}},
                        },
                    }
                ],
                "tool_choice": named(LARK_TOOL),
            },
            "regex",
        ),
        # a grammar that cannot compile is refused when sent, whether or not tool_choice calls it
        ({"tools": [BAD_LARK_TOOL]}, "custom tool 'broken'"),
        ({"tools": [BAD_LARK_TOOL], "tool_choice": "none"}, "custom tool 'broken'"),
    ],
)
def test_bad_custom_tools_are_400s_and_the_server_goes_on(live, extra, words):
    body = {"model": "tiny", "messages": USER, "max_tokens": 4, **extra}
    response = httpx.post(live.url + "/v1/chat/completions", json=body, timeout=60)
    assert response.status_code == 400, response.text
    assert words.lower() in response.json()["error"]["message"].lower()
    assert httpx.get(live.url + "/health", timeout=10).status_code == 200


def test_the_template_sees_a_custom_tool_as_a_function_of_one_string():
    body = ChatCompletionRequest.model_validate({"messages": USER, "tools": [REGEX_TOOL, TEXT_TOOL]})
    regex, text = as_template_tools(body.tools)
    assert regex["type"] == "function" and regex["function"]["name"] == "lookup"
    assert regex["function"]["parameters"]["properties"]["input"] == {"type": "string", "pattern": f"^(?:{ORDER_ID})$"}
    assert "Look an order up." in regex["function"]["description"] and ORDER_ID in regex["function"]["description"]
    assert text["function"]["parameters"]["required"] == ["input"] and "free text" in text["function"]["description"]


def test_an_auto_call_to_a_custom_tool_is_answered_as_one():
    parser = HermesParser()
    parser.custom = frozenset({"lookup"})
    text = 'ok <tool_call>{"name": "lookup", "arguments": {"input": "AB\\"C"}}</tool_call><tool_call>' + (
        '{"name": "add", "arguments": {"a": 1}}</tool_call>'
    )
    custom, function = ChatOutput(tools=parser).message(text).tool_calls
    assert custom["type"] == "custom" and custom["custom"] == {"name": "lookup", "input": 'AB"C'}
    assert function["type"] == "function" and function["function"]["arguments"] == '{"a": 1}'
    stream = ChatOutput(tools=parser)
    deltas = [stream.feed(text[i : i + 5]) for i in range(0, len(text), 5)] + [stream.finish()]
    inputs = [
        d["custom"]["input"] for out in deltas for d in out.get("tool_calls", []) if "input" in d.get("custom", {})
    ]
    assert inputs == ['AB"C']  # JSON holding the input: sent once, whole and decoded


# ----------------------------------------------------------------------------------- /v1/responses
FLAT_REGEX_TOOL = {  # the Responses API's flat shape of REGEX_TOOL
    "type": "custom",
    "name": "lookup",
    "description": "Look an order up.",
    "format": {"type": "grammar", "syntax": "regex", "definition": ORDER_ID},
}


def test_a_named_custom_tool_on_the_responses_api_and_its_output_sent_back(client):
    response = client.responses.create(
        model="tiny", input="Find my order", tools=[FLAT_REGEX_TOOL], tool_choice={"type": "custom", "name": "lookup"},
        max_output_tokens=40, temperature=1.0,
    )  # fmt: skip
    [call] = response.output
    assert call.type == "custom_tool_call" and call.name == "lookup" and call.call_id
    assert re.fullmatch(ORDER_ID, call.input), call.input
    follow_up = [
        {"role": "user", "content": "Find my order"},
        {"type": "custom_tool_call", "call_id": call.call_id, "name": "lookup", "input": call.input},
        {"type": "custom_tool_call_output", "call_id": call.call_id, "output": "shipped"},
    ]
    answer = client.responses.create(model="tiny", input=follow_up, tools=[FLAT_REGEX_TOOL], max_output_tokens=4)
    assert [item.type for item in answer.output] == ["message"]


def test_a_streamed_custom_call_on_the_responses_api_validates_against_the_openai_types(live):
    from openai.types.responses import Response, ResponseStreamEvent
    from pydantic import TypeAdapter

    from tests.runtime.server.live import sse_payloads

    body = {"model": "tiny", "input": "Find my order", "tools": [FLAT_REGEX_TOOL], "max_output_tokens": 40,
            "tool_choice": {"type": "custom", "name": "lookup"}, "temperature": 0}  # fmt: skip
    whole = httpx.post(live.url + "/v1/responses", json=body, timeout=60).json()
    Response.model_validate(whole, strict=False)
    streamed = httpx.post(live.url + "/v1/responses", json={**body, "stream": True}, timeout=60)
    payloads = [json.loads(p) for p in sse_payloads(streamed)]
    TypeAdapter(list[ResponseStreamEvent]).validate_python(payloads)
    deltas = "".join(p["delta"] for p in payloads if p["type"] == "response.custom_tool_call_input.delta")
    [done] = [p for p in payloads if p["type"] == "response.custom_tool_call_input.done"]
    assert deltas == done["input"] == whole["output"][0]["input"] and re.fullmatch(ORDER_ID, deltas)
    assert payloads[-1]["response"]["output"][0]["type"] == "custom_tool_call"


def test_a_custom_call_cut_short_gives_the_same_input_whole_and_streamed():
    """max_tokens cuts a call inside its input: the input so far, decoded, both ways, never its JSON."""
    parser = HermesParser()
    parser.custom = frozenset({"lookup"})
    for text, expected in [
        ('<tool_call>{"name": "lookup", "arguments": {"input": "AB\\"C', 'AB"C'),
        ('<tool_call>{"name": "lookup", "arguments": {"input":', ""),
    ]:
        [whole] = ChatOutput(tools=parser).message(text).tool_calls
        stream = ChatOutput(tools=parser)
        deltas = [stream.feed(text[i : i + 4]) for i in range(0, len(text), 4)] + [stream.finish()]
        pieces = [d.get("custom", {}).get("input") for out in deltas for d in out.get("tool_calls", [])]
        assert whole["custom"]["input"] == expected
        assert [p for p in pieces if p is not None] == [expected]


def test_a_cut_short_custom_call_arriving_in_one_last_chunk_streams_its_input():
    """The call's start and the finish in one engine output (stream_interval, merged chunks): the finish's
    custom.input was dropped when the two deltas were merged, where function arguments were joined."""
    parser = HermesParser()
    parser.custom = frozenset({"lookup"})
    body = ChatCompletionRequest.model_validate({"model": "tiny", "messages": USER, "stream": True})
    fmt = ChatFormat(body, "id", "tiny", TokenTexts(None), ToolPlan(parser=parser, finish_with_tool_calls=True))
    text = '<tool_call>{"name": "lookup", "arguments": {"input": "ABC-12'
    delta, reason = fmt.delta(CompletionOutput(0, text, [], None, finish_reason="length"))
    [call] = delta["tool_calls"]
    assert call["custom"] == {"name": "lookup", "input": "ABC-12"} and reason == "length"


def test_allowed_tools_list_custom_tools_in_openais_shape(client):
    choice = {"type": "allowed_tools", "allowed_tools": {"mode": "required", "tools": [named(REGEX_TOOL)]}}
    completion = client.chat.completions.create(
        model="tiny", messages=USER, tools=[REGEX_TOOL, FUNCTION_TOOL], tool_choice=choice, temperature=0
    )
    [choice_out] = completion.choices
    assert choice_out.message.tool_calls and all(c.type == "custom" for c in choice_out.message.tool_calls)
