"""POST /v1/responses through the openai client: a response is the chat completion it amounts to (same
prompt, same tokens at temperature 0), in the Responses API's shapes, whole or as its stream of events;
structured text formats and function tools as the client's helpers use them; clear 400s for what the
API asks that is not here (stored responses, hosted tools, images)."""

from __future__ import annotations

import json
from typing import Literal

import httpx
import jsonschema
import openai
import pytest
from pydantic import BaseModel, Field

from model_optimizer.runtime.engine.detokenizer import TokenTexts
from model_optimizer.runtime.engine.outputs import CompletionOutput
from model_optimizer.runtime.server.chat_format import ChatFormat
from model_optimizer.runtime.server.protocol_responses import ResponsesRequest
from model_optimizer.runtime.server.responses_output import ResponsesFormat
from model_optimizer.runtime.server.streaming import ChoiceDelta
from model_optimizer.runtime.server.tool_parsers import HermesParser
from model_optimizer.runtime.server.tools import ToolPlan
from tests.runtime.server.live import sse_payloads
from tests.runtime.server.test_structured_outputs import start_tools_server

LOGPROBS = ["message.output_text.logprobs"]
"""The `include` that asks for the output text's logprobs."""
INSTRUCTIONS = "You answer in one word."
QUESTION = "solve 8x + 7 = -23"
WEATHER = {
    "type": "function",
    "name": "get_weather",
    "description": "Weather for a city",
    "parameters": {
        "type": "object",
        "properties": {
            "city": {"type": "string", "maxLength": 12},
            "days": {"type": "integer", "minimum": 1, "maximum": 7},
        },
        "required": ["city", "days"],
        "additionalProperties": False,
    },
    "strict": True,
}


@pytest.fixture(scope="module")
def live(tiny_model, tmp_path_factory):
    """The tools server of test_structured_outputs (hermes parser, auto tool choice), one of this module's own."""
    server = start_tools_server(tiny_model, tmp_path_factory, 256, 16, tool_call_parser="hermes")
    yield server
    server.stop()


@pytest.fixture(scope="module")
def client(live):
    return openai.OpenAI(base_url=live.url + "/v1", api_key="unused", max_retries=0)


def test_a_response_is_the_chat_completion_it_amounts_to(client):
    messages = [{"role": "system", "content": INSTRUCTIONS}, {"role": "user", "content": QUESTION}]
    chat = client.chat.completions.create(model="tiny", messages=messages, max_tokens=12, temperature=0)
    response = client.responses.create(
        model="tiny", instructions=INSTRUCTIONS, input=QUESTION, max_output_tokens=12, temperature=0
    )
    assert response.id.startswith("resp_") and response.object == "response" and response.store is False
    [item] = response.output
    assert item.type == "message" and item.role == "assistant" and item.status == response.status
    assert response.output_text == chat.choices[0].message.content
    assert response.usage.input_tokens == chat.usage.prompt_tokens
    assert response.usage.output_tokens == chat.usage.completion_tokens
    assert response.usage.total_tokens == chat.usage.total_tokens
    # the same conversation as message items
    items = [{"role": "user", "content": [{"type": "input_text", "text": QUESTION}]}]
    again = client.responses.create(model="tiny", instructions=INSTRUCTIONS, input=items, max_output_tokens=12,
                                    temperature=0)  # fmt: skip
    assert again.output_text == response.output_text


def test_cut_by_max_output_tokens_is_incomplete(client):
    response = client.responses.create(model="tiny", input=QUESTION, max_output_tokens=3, temperature=0)
    if response.usage.output_tokens == 3:  # the random model may end sooner: then it is complete
        assert response.status == "incomplete" and response.incomplete_details.reason == "max_output_tokens"
    else:
        assert response.status == "completed" and response.incomplete_details is None


class Answer(BaseModel):  # bounded, so that even greedy decoding of the random model ends the document
    x: int = Field(ge=-100, le=100)
    unit: Literal["cm", "m"]
    exact: bool


def test_parse_with_a_pydantic_text_format(client):
    response = client.responses.parse(model="tiny", input=QUESTION, text_format=Answer, max_output_tokens=300)
    assert response.status == "completed"
    assert isinstance(response.output_parsed, Answer)
    jsonschema.validate(json.loads(response.output_text), Answer.model_json_schema())


def test_a_required_function_call_and_its_output_sent_back(client):
    response = client.responses.create(
        model="tiny", input="Weather in Oslo?", tools=[WEATHER], tool_choice="required", parallel_tool_calls=False,
        max_output_tokens=200, temperature=0,
    )  # fmt: skip
    assert response.status == "completed"
    calls = [item for item in response.output if item.type == "function_call"]
    assert len(calls) == 1 and calls[0].name == "get_weather"
    for call in calls:
        jsonschema.validate(json.loads(call.arguments), WEATHER["parameters"])
        assert call.call_id and call.id.startswith("fc_") and call.status == "completed"
    # the next turn: the calls and their outputs as input items
    follow_up = [
        {"role": "user", "content": "Weather in Oslo?"},
        *[{"type": "function_call", "call_id": c.call_id, "name": c.name, "arguments": c.arguments} for c in calls],
        *[{"type": "function_call_output", "call_id": c.call_id, "output": "sunny"} for c in calls],
    ]
    answer = client.responses.create(
        model="tiny", input=follow_up, tools=[WEATHER], tool_choice="none", max_output_tokens=8
    )
    assert [item.type for item in answer.output] == ["message"]


def test_allowed_tools_in_the_responses_shape(client):
    """tool_choice {"type": "allowed_tools", "mode", "tools"} (flat, as the Responses API writes it)."""
    other = {**WEATHER, "name": "get_time", "parameters": {"type": "object", "properties": {}}, "strict": False}
    response = client.responses.create(
        model="tiny", input="Weather in Oslo?", tools=[other, WEATHER], max_output_tokens=200, temperature=1.0,
        tool_choice={"type": "allowed_tools", "mode": "required", "tools": [{"type": "function", "name": "get_weather"}]},
    )  # fmt: skip
    calls = [item for item in response.output if item.type == "function_call"]
    assert calls and all(c.name == "get_weather" for c in calls)
    assert response.tool_choice.type == "allowed_tools"  # echoed as sent


def test_vllms_structured_outputs_constrain_a_response(live):
    """vLLM's structured_outputs on /v1/responses, as on chat; with text.format as well, one constraint
    too many (a 400), never one of them dropped."""
    body = {"model": "tiny", "input": "hi", "max_output_tokens": 8, "structured_outputs": {"regex": "ab|cd"}}
    r = httpx.post(live.url + "/v1/responses", json=body, timeout=60)
    assert r.status_code == 200, r.text
    assert r.json()["output"][0]["content"][0]["text"] in ("ab", "cd")
    both = {**body, "text": {"format": {"type": "json_object"}}}
    r = httpx.post(live.url + "/v1/responses", json=both, timeout=60)
    assert r.status_code == 400 and "one output constraint" in r.json()["error"]["message"], r.text


def _events(client, **kwargs) -> list:
    return list(client.responses.create(model="tiny", stream=True, **kwargs))


def test_a_streamed_response_sends_openais_events_in_order(client):
    kwargs = dict(input=QUESTION, instructions=INSTRUCTIONS, max_output_tokens=12, temperature=0)
    whole = client.responses.create(model="tiny", **kwargs)
    events = _events(client, **kwargs)
    kinds = [e.type for e in events]
    assert kinds[:4] == [
        "response.created",
        "response.in_progress",
        "response.output_item.added",
        "response.content_part.added",
    ]
    deltas = [e.delta for e in events if e.type == "response.output_text.delta"]
    assert kinds[4 : 4 + len(deltas)] == ["response.output_text.delta"] * len(deltas)
    assert kinds[4 + len(deltas) :] == [
        "response.output_text.done",
        "response.content_part.done",
        "response.output_item.done",
        f"response.{whole.status}",
    ]
    assert [e.sequence_number for e in events] == list(range(len(events)))
    final = events[-1].response
    assert "".join(deltas) == events[-4].text == final.output_text == whole.output_text
    assert final.usage.output_tokens == whole.usage.output_tokens and final.id == events[0].response.id


def test_a_streamed_function_call(client):
    events = _events(client, input="Weather in Oslo?", tools=[WEATHER], tool_choice="required", max_output_tokens=200,
                     parallel_tool_calls=False, temperature=0)  # fmt: skip
    assert events[-1].type == "response.completed"
    added = [e.item for e in events if e.type == "response.output_item.added"]
    assert added and all(item.type == "function_call" and item.name == "get_weather" for item in added)
    done = {e.item_id: e.arguments for e in events if e.type == "response.function_call_arguments.done"}
    pieces: dict[str, str] = {}
    for e in events:
        if e.type == "response.function_call_arguments.delta":
            pieces[e.item_id] = pieces.get(e.item_id, "") + e.delta
    assert pieces == done and set(done) == {item.id for item in added}
    for arguments in done.values():
        jsonschema.validate(json.loads(arguments), WEATHER["parameters"])
    final = events[-1].response
    assert [item.arguments for item in final.output] == [done[item.id] for item in added]


def test_logprobs_on_output_text_only_when_included(client):
    """As OpenAI's: logprobs come when `include` asks for them (top_logprobs: how many alternatives); without
    it the part's logprobs are an empty list, whatever top_logprobs says."""
    kwargs = dict(model="tiny", input=QUESTION, max_output_tokens=5, temperature=0, top_logprobs=2)
    response = client.responses.create(include=LOGPROBS, **kwargs)
    [part] = response.output[0].content
    assert len(part.logprobs) == response.usage.output_tokens
    assert "".join(lp.token for lp in part.logprobs) == part.text
    assert all(len(lp.top_logprobs) == 2 for lp in part.logprobs)
    plain = client.responses.create(**kwargs)
    [plain_part] = plain.output[0].content
    assert plain_part.logprobs == [] and plain_part.text == part.text and plain.top_logprobs == 2


@pytest.mark.parametrize(
    ("body", "param", "message"),
    [
        ({"previous_response_id": "resp_x"}, "previous_response_id", "not stored"),
        ({"background": True}, "background", "nothing is stored"),
        ({"tools": [{"type": "web_search"}]}, "tools[0].type", "only function and custom tools"),
        (
            {"input": [{"role": "user", "content": [{"type": "input_image", "image_url": "x"}]}]},
            "input[0].content[0]",
            "only text parts",
        ),  # fmt: skip
        ({"input": [{"type": "item_reference", "id": "x"}]}, "input[0].type", "not supported"),
        ({"input": [{"role": "robot", "content": "hi"}]}, "input[0].role", "must be one of"),
        ({"text": {"format": {"type": "xml"}}}, "text.format", "text, json_object or json_schema"),
        ({"tool_choice": {"type": "file_search"}}, "tool_choice", "name a function or custom tool"),
        (  # the field's path, without the labels pydantic gives a union's branches
            {"text": {"format": {"type": "json_schema", "name": "x", "schema": 5}}},
            "text.format.schema",
            "valid dictionary",
        ),
        (
            {
                "tools": [WEATHER],
                "tool_choice": {"type": "allowed_tools", "tools": [{"type": "function", "name": "x"}]},
            },
            "tool_choice.mode",
            "auto or required",
        ),
        (
            {
                "tools": [WEATHER],
                "tool_choice": {
                    "type": "allowed_tools",
                    "mode": "auto",
                    "tools": [{"type": "mcp", "name": "get_weather"}],
                },
            },
            "tool_choice.tools",
            "function or custom tools",
        ),
        ({"input": []}, "input", "input is empty"),
        ({"conversation": "conv_1"}, "conversation", "not stored here"),  # state on OpenAI's side: never ignored
        ({"prompt": {"id": "pmpt_1"}}, "prompt", "not stored here"),
        ({"context_management": [{"type": "compaction"}]}, "context_management", "not stored here"),
        ({"include": ["message.output_text.logprob"]}, "include", "Input should be"),
        ({"metadata": {"k": "v" * 513}}, "metadata", "at most 512"),
        (
            {"input": [{"type": "function_call_output", "call_id": "call_1", "output": "12C"}]},
            "input",
            "no function_call before",
        ),
        ({"input": "x " * 600}, "input", "max_model_len"),  # a text bounded by the context (named as sent)
        ({"input": "x" * 5000}, "input", "max_model_len"),  # not by the items' 4,096
        ({"truncation": "auto"}, "truncation", "not supported"),
        # a json_schema format's name: required, with OpenAI's rule
        ({"text": {"format": {"type": "json_schema", "schema": {}}}}, "text.format.name", "needs name"),
        (
            {"text": {"format": {"type": "json_schema", "name": "my schema", "schema": {}}}},
            "text.format.name",
            "letters, digits",
        ),  # fmt: skip
        ({"text": {"format": {"type": "json_schema", "name": "x" * 65, "schema": {}}}}, "text.format.name", "1 to 64"),
        (  # chat's path for it (response_format.json_schema.strict) is this request's
            {"text": {"format": {"type": "json_schema", "name": "x", "schema": {}, "strict": "yes"}}},
            "text.format.strict",
            "text.format.strict: Input should be a valid boolean",
        ),
        ({"max_output_tokens": 100_000}, "max_output_tokens", "max_output_tokens"),
        ({"tools": [{"type": "function", "name": "bad name"}]}, "tools[0].name", "String should match"),
        (
            {
                "text": {
                    "format": {
                        "type": "json_schema",
                        "name": "x",
                        "schema": {"minimum": 5, "maximum": 1, "type": "integer"},
                    }
                }
            },
            "text.format",
            "minimum",
        ),  # fmt: skip
    ],
)
def test_what_is_not_here_is_a_clear_400(live, body, param, message):
    r = httpx.post(live.url + "/v1/responses", json={"model": "tiny", "input": "hi", **body}, timeout=60)
    assert r.status_code == 400, r.text
    error = r.json()["error"]
    assert error["param"] == param and message in error["message"]
    assert httpx.get(live.url + "/health").status_code == 200


def test_a_format_sent_loosely_comes_back_as_the_openai_types_have_it(live):
    """A json_schema format with its schema sent as text comes back as the openai types have it (an object),
    and so do the other settings a response echoes."""
    from openai.types.responses import Response

    schema = {"type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"]}
    text = {"format": {"type": "json_schema", "name": "a-1", "schema": json.dumps(schema)}, "verbosity": "low"}
    body = {
        "model": "tiny",
        "input": "hi",
        "max_output_tokens": 20,
        "text": text,
        "reasoning": {"summary": "auto"},
    }
    r = httpx.post(live.url + "/v1/responses", json=body, timeout=60)
    assert r.status_code == 200, r.text
    response = Response.model_validate(r.json(), strict=False)
    assert response.text.format.name == "a-1" and response.text.format.schema_ == schema
    assert response.text.verbosity == "low" and response.reasoning.summary == "auto"


def test_store_is_taken_and_answered_false(live):
    body = {"model": "tiny", "input": "hi", "store": True, "max_output_tokens": 2, "metadata": {"k": "v"}}
    r = httpx.post(live.url + "/v1/responses", json=body, timeout=60).json()
    assert r["store"] is False and r["metadata"] == {"k": "v"}
    metrics = httpx.get(live.url + "/metrics").text
    assert 'handler="/v1/responses",method="POST",status="200"' in metrics


def test_a_stored_responses_routes_say_nothing_is_stored(client):
    """retrieve, delete, cancel and input_items through the openai client: a 404 that says why (none is
    stored), not a bare Not Found that reads as a wrong base URL."""
    calls = [
        lambda: client.responses.retrieve("resp_1"),
        lambda: client.responses.delete("resp_1"),
        lambda: client.responses.cancel("resp_1"),
        lambda: client.responses.input_items.list("resp_1"),
    ]
    for call in calls:
        with pytest.raises(openai.NotFoundError) as caught:
            call()
        error = caught.value.body
        assert "'resp_1'" in error["message"] and "stores none" in error["message"]
        assert error["param"] == "response_id"


def test_input_tokens_count_the_prompt_a_response_has(client, live):
    """client.responses.input_tokens.count: the prompt tokens the same request's response reports (the
    template, instructions, items and tools rendered alike); its errors name the request's fields."""
    requests = [
        dict(input=QUESTION),
        dict(instructions=INSTRUCTIONS, input=[{"role": "user", "content": QUESTION}]),
        dict(input="Weather in Oslo?", tools=[WEATHER], reasoning={"effort": "low"}),
    ]
    for kwargs in requests:
        count = client.responses.input_tokens.count(model="tiny", **kwargs)
        response = client.responses.create(model="tiny", max_output_tokens=1, **kwargs)
        assert count.object == "response.input_tokens" and count.input_tokens == response.usage.input_tokens
    bad = {"model": "tiny", "input": "hi", "tools": [{"type": "function", "name": "bad name"}]}
    r = httpx.post(live.url + "/v1/responses/input_tokens", json=bad, timeout=60)
    assert r.status_code == 400 and r.json()["error"]["param"] == "tools[0].name", r.text


def test_the_clients_stream_helper_builds_the_same_response(client):
    """client.responses.stream() rebuilds the response from the events (it needs response.completed, so the
    output is a schema's: the constrained document ends)."""
    kwargs = dict(model="tiny", input=QUESTION, text_format=Answer, max_output_tokens=300, temperature=0)
    whole = client.responses.parse(**kwargs)
    with client.responses.stream(**kwargs) as stream:
        texts = [event.delta for event in stream if event.type == "response.output_text.delta"]
        final = stream.get_final_response()
    assert "".join(texts) == final.output_text == whole.output_text
    assert final.output_parsed == whole.output_parsed and isinstance(final.output_parsed, Answer)


def test_responses_and_events_validate_against_the_openai_types(live):
    """Every field the openai package declares required is there, with its type: the whole response, and
    each streamed event as the stream's union of event types reads it (strictly, not the client's lenient
    loading)."""
    from openai.types.responses import Response, ResponseStreamEvent
    from pydantic import TypeAdapter

    bodies = [
        {"input": QUESTION, "max_output_tokens": 4, "top_logprobs": 1, "include": LOGPROBS},
        {
            "input": "Weather in Oslo?",
            "tools": [WEATHER],
            "tool_choice": "required",
            "temperature": 0,
            "max_output_tokens": 200,
        },  # fmt: skip
    ]
    events = TypeAdapter(list[ResponseStreamEvent])
    for body in bodies:
        whole = httpx.post(live.url + "/v1/responses", json={"model": "tiny", **body}, timeout=60).json()
        Response.model_validate(whole, strict=False)
        streamed = httpx.post(live.url + "/v1/responses", json={"model": "tiny", "stream": True, **body}, timeout=60)
        payloads = [json.loads(p) for p in sse_payloads(streamed) if p != "[DONE]"]
        assert payloads[0]["type"] == "response.created" and payloads[-1]["type"].startswith("response.")
        events.validate_python(payloads)
        names = [block.split("\n")[0] for block in streamed.text.split("\n\n") if block.startswith("event:")]
        assert names == [f"event: {p['type']}" for p in payloads]  # each event named, as OpenAI's streams
        final = payloads[-1]["response"]
        Response.model_validate(final, strict=False)
        if body.get("temperature") == 0:  # greedy: the stream's items are the whole response's, ids aside
            strip = [{k: v for k, v in item.items() if k not in ("id", "call_id")} for item in whole["output"]]
            assert [{k: v for k, v in item.items() if k not in ("id", "call_id")} for item in final["output"]] == strip


def test_an_agent_loops_output_sent_back_is_chats_conversation(client, live):
    """The usual agent loop sends the response's output items back: the assistant's text and its calls make
    one assistant turn, as chat writes them (same prompt tokens as chat's conversation)."""
    call = {
        "type": "function_call",
        "call_id": "call_1",
        "name": "get_weather",
        "arguments": '{"city":"Oslo","days":1}',
    }
    items = [
        {"role": "user", "content": "Weather in Oslo?"},
        {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "Let me check."}]},
        call,
        {"type": "function_call_output", "call_id": "call_1", "output": "sunny"},
    ]
    response = client.responses.create(model="tiny", input=items, tools=[WEATHER], max_output_tokens=1)
    tool = {"type": "function", "function": {k: WEATHER[k] for k in ("name", "description", "parameters", "strict")}}
    messages = [
        {"role": "user", "content": "Weather in Oslo?"},
        {"role": "assistant", "content": "Let me check.", "tool_calls": [
            {"id": "call_1", "type": "function", "function": {"name": "get_weather", "arguments": call["arguments"]}}]},
        {"role": "tool", "tool_call_id": "call_1", "content": "sunny"},
    ]  # fmt: skip
    chat = client.chat.completions.create(model="tiny", messages=messages, tools=[tool], max_tokens=1)
    assert response.usage.input_tokens == chat.usage.prompt_tokens


def test_newer_effort_levels_are_taken(client):
    response = client.responses.create(model="tiny", input="hi", reasoning={"effort": "xhigh"}, max_output_tokens=1)
    assert response.reasoning.effort == "xhigh"


def test_function_tools_are_strict_unless_they_say_not():
    """OpenAI's Responses API, unlike chat, makes a function tool without `strict` strict, its schema
    normalised to strict mode: objects closed, every property required (nested ones too)."""
    from model_optimizer.runtime.server.protocol_responses import ResponsesRequest

    inner = {"type": "object", "properties": {"unit": {"type": "string"}}}
    loose = {"type": "object", "properties": {"city": {"type": "string"}, "where": inner}, "required": ["city"]}
    tools = [
        {"type": "function", "name": "a", "parameters": loose},
        {"type": "function", "name": "b", "parameters": loose, "strict": None},
        {"type": "function", "name": "c", "parameters": loose, "strict": False},
        {"type": "function", "name": "d", "parameters": loose, "strict": True},
    ]
    chat = ResponsesRequest.model_validate({"input": "q", "tools": tools}).to_chat()
    made = {t.function.name: t.function for t in chat.tools}
    for name in ("a", "b"):
        assert made[name].strict is True
        parameters = made[name].parameters
        assert parameters["required"] == ["city", "where"] and parameters["additionalProperties"] is False
        assert parameters["properties"]["where"]["required"] == ["unit"]
    assert made["c"].strict is False and made["c"].parameters == loose  # best effort, as sent
    assert made["d"].strict is True and made["d"].parameters == loose  # strict as sent: the client's schema


def test_input_items_become_the_chat_turns_they_stand_for():
    """The conversion itself (no server): thinking goes to the assistant turn right after it, never across
    a user turn; an encrypted-only reasoning item adds nothing; calls join the assistant message before them."""
    from model_optimizer.runtime.server.protocol_responses import ResponsesRequest

    def turns(items):
        chat = ResponsesRequest.model_validate({"input": items}).to_chat()
        return [(m.role, m.content, m.reasoning, len(m.tool_calls or [])) for m in chat.messages]

    thought = {"type": "reasoning", "summary": [], "content": [{"type": "reasoning_text", "text": "r1"}]}
    call = {"type": "function_call", "call_id": "c1", "name": "f", "arguments": "{}"}
    cut_while_thinking = [{"role": "user", "content": "q1"}, thought, {"role": "user", "content": "q2"},
                          {"role": "assistant", "content": "a2"}]  # fmt: skip
    assert turns(cut_while_thinking) == [("user", "q1", None, 0), ("user", "q2", None, 0), ("assistant", "a2", None, 0)]
    encrypted = {"type": "reasoning", "summary": [], "encrypted_content": "xyz"}
    loop = [{"role": "user", "content": "q"}, thought, {"role": "assistant", "content": "let me see"}, encrypted, call,
            {"type": "function_call_output", "call_id": "c1", "output": "ok"}]  # fmt: skip
    assert turns(loop) == [("user", "q", None, 0), ("assistant", "let me see", "r1", 1), ("tool", "ok", None, 0)]
    assert turns([thought, call]) == [("assistant", None, "r1", 1)]
    # a client that sends back the response's own tool_choice ("auto") without tools: as OpenAI, no 400
    assert ResponsesRequest.model_validate({"input": "q", "tool_choice": "auto"}).to_chat().tool_choice is None
    refused = {"role": "assistant", "content": [{"type": "refusal", "refusal": "I can't"}]}  # OpenAI's output shape
    assert turns([{"role": "user", "content": "q"}, refused]) == [
        ("user", "q", None, 0),
        ("assistant", "I can't", None, 0),
    ]


def test_streamed_logprobs_cover_every_token_only_when_included(client):
    kwargs = dict(input=QUESTION, max_output_tokens=6, temperature=0, top_logprobs=1)
    events = _events(client, include=LOGPROBS, **kwargs)
    streamed = [lp for e in events if e.type == "response.output_text.delta" for lp in e.logprobs]
    final = events[-1].response
    assert len(streamed) == final.usage.output_tokens == len(final.output[0].content[0].logprobs)
    plain = _events(client, **kwargs)
    texts = [e for e in plain if e.type in ("response.output_text.delta", "response.output_text.done")]
    assert texts and all(e.logprobs == [] for e in texts)
    assert plain[-1].response.output[0].content[0].logprobs == []
    assert plain[-1].response.output_text == final.output_text


def test_logprobs_are_asked_of_the_engine_only_when_included(tiny_model, tmp_path_factory):
    """A server that allows at most 1 logprob (--max-logprobs 1) serves top_logprobs 2 without the include,
    whole and streamed: nothing is asked of the engine (OpenAI's reading); with it, the cap's 400 names the
    field (chat's cap, named as this request spells it)."""
    server = start_tools_server(tiny_model, tmp_path_factory, 64, 4, tool_call_parser="hermes", max_logprobs=1)
    try:
        body = {"model": "tiny", "input": QUESTION, "max_output_tokens": 3, "top_logprobs": 2}
        for stream in (False, True):
            r = httpx.post(server.url + "/v1/responses", json={**body, "stream": stream}, timeout=60)
            assert r.status_code == 200, r.text
        r = httpx.post(server.url + "/v1/responses", json={**body, "include": LOGPROBS}, timeout=60)
        assert r.status_code == 400, r.text
        error = r.json()["error"]
        assert error["param"] == "top_logprobs" and error["message"].startswith("top_logprobs is 2"), error
    finally:
        server.stop()


def test_streamed_call_items_close_one_at_a_time():
    """Two calls in one stream: the first call's done events come before the second's output_item.added
    (it stayed open until the stream's end, the two items' events interleaved)."""
    body = ResponsesRequest.model_validate({"model": "tiny", "input": "hi", "stream": True})
    plan = ToolPlan(parser=HermesParser(), finish_with_tool_calls=True)
    fmt = ResponsesFormat(body, ChatFormat(body.to_chat(), "resp_1", "tiny", TokenTexts(None), plan), "resp_1")
    text = (
        '<tool_call>{"name": "a", "arguments": {"x": 1}}</tool_call>\n'
        '<tool_call>{"name": "b", "arguments": {"y": 2}}</tool_call>'
    )
    pieces = [text[:48], text[48:100], text[100:]]
    events = []
    for i, piece in enumerate(pieces):
        done = i == len(pieces) - 1
        out = fmt.chunk([ChoiceDelta(0, CompletionOutput(0, piece, [], None, "stop" if done else None), i == 0)])
        events += [json.loads(line[6:]) for line in (out or b"").decode().splitlines() if line.startswith("data: ")]
    order = [(e["type"], e.get("output_index")) for e in events]
    added = [index for kind, index in order if kind == "response.output_item.added"]
    finished = [index for kind, index in order if kind == "response.output_item.done"]
    assert added == finished == [0, 1]
    assert order.index(("response.output_item.done", 0)) < order.index(("response.output_item.added", 1))
    assert [e["arguments"] for e in events if e["type"] == "response.function_call_arguments.done"] == [
        '{"x": 1}',
        '{"y": 2}',
    ]
