"""Structured outputs and tools through the real server with the `openai` client, unchanged.

A live server on the tiny Qwen3 (random weights: only the constraint makes its output valid), started
with a tools-aware chat template and `--enable-auto-tool-choice --tool-call-parser hermes`
(test_reasoning_outputs.py has the reasoning parsers). The client's own helpers (`chat.completions.parse` with a pydantic model,
`pydantic_function_tool`, `chat.completions.stream` accumulating tool-call deltas) run against it.
The auto parser is driven end to end by constraining the model to write a call (a regex), since a
random model never would.
"""

from __future__ import annotations

import datetime
import json
import re
import time
from typing import Literal

import httpx
import jsonschema
import openai
import pytest
from pydantic import BaseModel, Field

from model_optimizer.runtime.server.config import ServerConfig
from model_optimizer.runtime.server.protocol_chat import ChatCompletionRequest
from tests.runtime.server.live import start_server
from tests.runtime.server.test_endpoints import sse_events

TOOLS_TEMPLATE = (
    "{% if tools %}<|im_start|>system\nTools:{% for t in tools %} {{ t.function.name }}"
    "({{ (t.function.parameters or {}).get('properties', {}) | list | join(',') }}){% endfor %}<|im_end|>\n{% endif %}"
    "{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}"
    "{% for c in m.tool_calls or [] %}<tool_call>{{ c.function | tojson }}</tool_call>{% endfor %}"
    "{% if m.tool_call_id %} [{{ m.tool_call_id }}]{% endif %}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)


class Step(BaseModel):
    explanation: str = Field(max_length=12)
    output: int = Field(ge=-100, le=100)


class Answer(BaseModel):
    steps: list[Step] = Field(min_length=1, max_length=3)
    final: Literal["x=-3", "x=3"]
    confident: bool


class Weather(BaseModel):
    city: Literal["Paris", "Oslo"]
    days: int = Field(ge=1, le=7)


STRICT_WEATHER = {**Weather.model_json_schema(), "additionalProperties": False}


def start_tools_server(tiny_model, tmp_path_factory, num_kv_blocks: int, max_num_seqs: int, **parsers):
    """The tiny Qwen3 behind a live server with TOOLS_TEMPLATE and auto tool choice by `parsers`."""
    from model_optimizer import LLM

    template = tmp_path_factory.mktemp("template") / "tools.jinja"
    template.write_text(TOOLS_TEMPLATE)
    llm = LLM(str(tiny_model("qwen3")), max_model_len=512, num_kv_blocks=num_kv_blocks, max_num_seqs=max_num_seqs)
    config = ServerConfig(
        served_model_name="tiny", chat_template=str(template), enable_auto_tool_choice=True, **parsers
    )
    return start_server(llm, config)


@pytest.fixture(scope="module")
def live(tiny_model, tmp_path_factory):
    server = start_tools_server(tiny_model, tmp_path_factory, 256, 16, tool_call_parser="hermes")
    yield server
    server.stop()


@pytest.fixture(scope="module")
def client(live):
    return openai.OpenAI(base_url=live.url + "/v1", api_key="unused", max_retries=0)


USER = [{"role": "user", "content": "solve 8x + 7 = -23"}]


@pytest.mark.parametrize("temperature", [0.0, 1.0])
def test_parse_with_a_pydantic_model(client, temperature):
    completion = client.chat.completions.parse(
        model="tiny", messages=USER, response_format=Answer, temperature=temperature, n=2, seed=1, max_tokens=300
    )
    for choice in completion.choices:
        assert choice.finish_reason == "stop"
        assert isinstance(choice.message.parsed, Answer)
        assert Answer.model_validate_json(choice.message.content) == choice.message.parsed


class Meeting(BaseModel):
    at: datetime.datetime
    day: datetime.date
    start: datetime.time


def test_parse_reads_every_date_and_time_the_constraint_lets_out(client):
    """llguidance's formats follow RFC 3339, whose leap second (`23:59:60`), year 0000 and February 29th of any
    year pydantic refuses: the server makes them patterns of what Python reads (structured/json_schema.py)."""
    completion = client.chat.completions.parse(
        model="tiny", messages=USER, response_format=Meeting, temperature=1.0, n=16, seed=3, max_tokens=120
    )
    assert all(isinstance(choice.message.parsed, Meeting) for choice in completion.choices)


def test_json_schema_and_json_object_streamed_and_not(client):
    """A strict schema (the client's own conversion of a pydantic model) always completes; any JSON object
    may run to max_tokens on a random model, and is then a prefix of one (engine tests run it to the end
    on the built-in model)."""
    from openai.lib._pydantic import to_strict_json_schema

    schema = to_strict_json_schema(Weather)
    for response_format in (
        {
            "type": "json_schema",
            "json_schema": {"name": "weather", "schema": schema},
        },  # not strict: enforced all the same
        {"type": "json_object"},
    ):
        kwargs = dict(model="tiny", messages=USER, response_format=response_format, max_tokens=60, temperature=0)
        whole = client.chat.completions.create(**kwargs)
        stream = client.chat.completions.create(**kwargs, stream=True)
        streamed = "".join(c.choices[0].delta.content or "" for c in stream if c.choices)
        assert streamed == whole.choices[0].message.content
        if whole.choices[0].finish_reason == "stop":
            assert isinstance(json.loads(streamed), dict)
        else:
            assert response_format["type"] == "json_object" and streamed.startswith("{")
        if response_format["type"] == "json_schema":
            jsonschema.validate(json.loads(streamed), schema)


def test_completions_take_vllm_fields_and_response_format(live):
    url = live.url + "/v1/completions"
    base = {"prompt": "The", "max_tokens": 100, "temperature": 1.0, "n": 3, "seed": 4}
    cases = [
        ({"structured_outputs": {"choice": ["cat", "dog house"]}}, lambda t: t in ("cat", "dog house")),
        ({"guided_choice": ["left", "right"]}, lambda t: t in ("left", "right")),
        ({"guided_regex": r"[A-Z][a-z]{2,5} [0-9]{2}"}, lambda t: re.fullmatch(r"[A-Z][a-z]{2,5} [0-9]{2}", t)),
        ({"guided_grammar": 'root ::= "go " ("north" | "south")'}, lambda t: t in ("go north", "go south")),
        ({"structured_outputs": {"grammar": 'start: "n=" /[0-9]{1,2}/'}}, lambda t: re.fullmatch(r"n=\d{1,2}", t)),
        ({"guided_json": STRICT_WEATHER}, Weather.model_validate_json),
        (
            {"response_format": {"type": "json_schema", "json_schema": {"name": "w", "schema": STRICT_WEATHER}}},
            Weather.model_validate_json,
        ),
    ]
    for extra, valid in cases:
        r = httpx.post(url, json={**base, **extra}, timeout=60)
        assert r.status_code == 200, r.text
        for choice in r.json()["choices"]:
            assert choice["finish_reason"] == "stop" and valid(choice["text"]), (extra, choice["text"])


def test_logprobs_of_a_constrained_choice_list_allowed_tokens_only(live):
    r = httpx.post(
        live.url + "/v1/completions",
        json={"prompt": "The", "max_tokens": 10, "temperature": 0, "logprobs": 5, "guided_choice": ["alpha", "beta"]},
        timeout=60,
    )
    choice = r.json()["choices"][0]
    assert choice["text"] in ("alpha", "beta")
    first = choice["logprobs"]["top_logprobs"][0]
    assert all("alpha".startswith(t) or "beta".startswith(t) for t in first)


def test_logprobs_of_tokens_that_split_a_character(live):
    """A regex forces text whose emoji the tokenizer writes as byte tokens (each alone decodes to U+FFFD):
    text_offset is where each token's character starts, the same streamed and not, and chat's `bytes` of
    the tokens join into the content, as OpenAI documents them."""
    text = "aé😀b"
    body = {"prompt": "x", "max_tokens": 16, "guided_regex": text, "logprobs": 0}
    choice = httpx.post(live.url + "/v1/completions", json=body, timeout=60).json()["choices"][0]
    assert choice["text"] == text
    tokens, offsets = choice["logprobs"]["tokens"], choice["logprobs"]["text_offset"]
    assert "\ufffd" in "".join(tokens) and offsets[-1] == text.index("b") and tokens[-1] == "b"
    assert all(0 <= offset < len(text) for offset in offsets)
    streamed = httpx.post(live.url + "/v1/completions", json={**body, "stream": True}, timeout=60).text
    chunks = [json.loads(line[6:]) for line in streamed.split("\n\n") if line.startswith("data: {")]
    assert [
        o for c in chunks for ch in c["choices"] if ch["logprobs"] for o in ch["logprobs"]["text_offset"]
    ] == offsets
    chat = {"messages": USER, "max_tokens": 16, "guided_regex": text, "logprobs": True, "top_logprobs": 2}
    content = httpx.post(live.url + "/v1/chat/completions", json=chat, timeout=60).json()["choices"][0]["logprobs"]
    assert b"".join(bytes(t["bytes"]) for t in content["content"]).decode() == text
    for entry in content["content"]:
        assert all(bytes(top["bytes"]).decode(errors="replace") == top["token"] for top in entry["top_logprobs"])


@pytest.mark.parametrize("stream", [False, True])
def test_required_tool_calls_through_the_clients_helpers(client, stream):
    tools = [openai.pydantic_function_tool(Weather, name="get_weather"), openai.pydantic_function_tool(Step)]
    kwargs = dict(
        model="tiny", messages=USER, tools=tools, tool_choice="required", max_tokens=300, temperature=1.0, seed=3
    )
    if stream:
        with client.chat.completions.stream(**kwargs) as events:
            completion = events.get_final_completion()
    else:
        completion = client.chat.completions.parse(**kwargs)
    choice = completion.choices[0]
    assert choice.finish_reason == "tool_calls" and not choice.message.content  # a stream's role chunk has ""
    calls = choice.message.tool_calls
    assert calls and len({c.id for c in calls}) == len(calls) and all(c.id.startswith("call_") for c in calls)
    for call in calls:
        model = {"get_weather": Weather, "Step": Step}[call.function.name]
        assert isinstance(call.function.parsed_arguments, model)
        assert model.model_validate_json(call.function.arguments) == call.function.parsed_arguments


def test_a_stop_string_that_cuts_a_call_leaves_the_finish_reason_stop(client):
    """finish_reason "tool_calls" says the calls are whole: a call a stop string cut short is "stop", streamed
    and not (the openai client's parse would fail on its arguments)."""
    tools = [openai.pydantic_function_tool(Weather, name="get_weather")]
    kwargs = dict(model="tiny", messages=USER, tools=tools, tool_choice="required", max_tokens=100, seed=2, stop=[","])
    whole = client.chat.completions.create(**kwargs).choices[0]
    streamed = [c.choices[0].finish_reason for c in client.chat.completions.create(**kwargs, stream=True)]
    assert whole.finish_reason == streamed[-1] == "stop" and whole.stop_reason == ","  # type: ignore[attr-defined]
    assert whole.message.tool_calls  # the cut call is there, as a cut one is under max_tokens


def test_named_tool_choice_and_one_call_without_parallel_calls(client):
    tools = [openai.pydantic_function_tool(Weather, name="get_weather")]
    named = client.chat.completions.parse(
        model="tiny",
        messages=USER,
        tools=tools,
        tool_choice={"type": "function", "function": {"name": "get_weather"}},
        max_tokens=200,
    )
    [call] = named.choices[0].message.tool_calls
    assert named.choices[0].finish_reason == "stop"  # as OpenAI reports a forced function
    assert isinstance(call.function.parsed_arguments, Weather)
    single = client.chat.completions.create(
        model="tiny", messages=USER, tools=tools, tool_choice="required", parallel_tool_calls=False, max_tokens=200, n=3
    )
    assert all(len(c.message.tool_calls) == 1 for c in single.choices)


@pytest.mark.parametrize(
    "choice", ["required", {"type": "function", "function": {"name": "get_weather"}}], ids=["required", "named"]
)
def test_a_forced_call_ignores_the_requests_response_format(client, choice):
    """An agent framework that always sends a response_format still gets its forced call: the output is only
    calls, which the format would not shape (vLLM ignores it; OpenAI accepts both)."""
    tools = [openai.pydantic_function_tool(Weather, name="get_weather")]
    forced = client.chat.completions.parse(
        model="tiny",
        messages=USER,
        tools=tools,
        tool_choice=choice,
        response_format={"type": "json_schema", "json_schema": {"name": "answer", "schema": {"type": "integer"}}},
        max_tokens=200,
    )
    [call] = forced.choices[0].message.tool_calls[:1]
    assert call.function.name == "get_weather" and isinstance(call.function.parsed_arguments, Weather)


@pytest.mark.parametrize("stream", [False, True])
def test_allowed_tools_required_calls_only_the_listed_tools(client, stream):
    """OpenAI's allowed_tools: the prompt shows both tools, the calls go to the listed one only."""
    tools = [openai.pydantic_function_tool(Weather, name="get_weather"), openai.pydantic_function_tool(Step)]
    choice = {"type": "allowed_tools", "allowed_tools": {"mode": "required", "tools": [tools[1]]}}
    kwargs = dict(model="tiny", messages=USER, tools=tools, tool_choice=choice, max_tokens=300, temperature=1.0)
    if stream:
        with client.chat.completions.stream(**kwargs, seed=4) as events:
            choices = events.get_final_completion().choices
    else:
        choices = client.chat.completions.parse(**kwargs, n=3, seed=4).choices
    for c in choices:
        assert c.finish_reason == "tool_calls" and c.message.tool_calls
        assert all(isinstance(call.function.parsed_arguments, Step) for call in c.message.tool_calls)
    listed = client.chat.completions.create(model="tiny", messages=USER, tools=tools, tool_choice="none", max_tokens=1)
    shown = client.chat.completions.create(
        model="tiny", messages=USER, tools=tools[:1], tool_choice="none", max_tokens=1
    )
    assert listed.usage.prompt_tokens > shown.usage.prompt_tokens  # both tools reach the template


def test_vllms_whitespace_pattern_goes_with_a_json_response_format_and_true_as_text_is_any_json(live):
    """guided_whitespace_pattern applies to response_format's JSON as to guided_json (vLLM's reading), and a
    schema given as the JSON text `true` (spaces around it or not) is any JSON value."""
    body = {"model": "tiny", "messages": USER, "max_tokens": 40, "temperature": 0}
    for extra in (
        {"response_format": {"type": "json_object"}, "guided_whitespace_pattern": " ?"},
        {"structured_outputs": {"json": " true\n"}},
    ):
        r = httpx.post(live.url + "/v1/chat/completions", json={**body, **extra}, timeout=60)
        assert r.status_code == 200, r.text


def test_allowed_tools_auto_constrains_calls_to_the_listed_tools(tmp_path):
    """Mode auto with some of the tools: the model writes text, and a call it starts (hermes' <tool_call>)
    must be to a listed tool under its schema; every tool listed is plain auto."""
    from types import SimpleNamespace

    from model_optimizer.runtime.server.protocol_chat import ChatCompletionRequest
    from model_optimizer.runtime.server.tools import tool_plan
    from tests.runtime.structured.test_grammar import _matching

    state = SimpleNamespace(config=ServerConfig(enable_auto_tool_choice=True, tool_call_parser="hermes"))
    tools = [openai.pydantic_function_tool(Weather, name="get_weather"), openai.pydantic_function_tool(Step)]

    def plan(*names: str):
        listed = [{"type": "function", "function": {"name": n}} for n in names]
        choice = {"type": "allowed_tools", "allowed_tools": {"mode": "auto", "tools": listed}}
        return tool_plan(
            state, ChatCompletionRequest.model_validate({"messages": USER, "tools": tools, "tool_choice": choice})
        )

    taken = _matching(tmp_path, ["<tool_call>", "</tool_call>"])
    only_weather = plan("get_weather")
    assert only_weather.finish_with_tool_calls and len(only_weather.template_tools) == 2
    call = '<tool_call>\n{"name": "%s", "arguments": %s}\n</tool_call>'
    assert taken(only_weather.constraint, "Sure. " + call % ("get_weather", '{"city":"Oslo","days":2}'))
    assert taken(only_weather.constraint, "No call needed.")
    assert not taken(only_weather.constraint, call % ("Step", '{"explanation":"a","output":1}'))
    assert not taken(only_weather.constraint, call % ("get_weather", '{"city":"Rome","days":2}'))  # strict schema
    auto = tool_plan(state, ChatCompletionRequest.model_validate({"messages": USER, "tools": tools}))
    assert plan("get_weather", "Step").constraint == auto.constraint  # the client's tools are strict


def test_a_developer_message_renders_as_the_system_s(live):
    """OpenAI's developer role, through a template that knows only system (as most open models' do): the
    same prompt as a system message (the server's /tokenize renders chats as chat completions do)."""

    def tokens(role: str) -> list[int]:
        body = {"model": "tiny", "messages": [{"role": role, "content": "be terse"}, *USER]}
        return httpx.post(live.url + "/tokenize", json=body, timeout=60).json()["tokens"]

    assert tokens("developer") == tokens("system")


def test_a_conversation_with_tool_results_renders_tools_and_tool_messages(client):
    tools = [openai.pydantic_function_tool(Weather, name="get_weather")]
    messages = USER + [
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": "call_1",
                    "type": "function",
                    "function": {"name": "get_weather", "arguments": '{"city": "Oslo", "days": 2}'},
                }
            ],
        },
        {"role": "tool", "tool_call_id": "call_1", "content": "rain"},
    ]
    plain = client.chat.completions.create(model="tiny", messages=USER, max_tokens=1)
    full = client.chat.completions.create(
        model="tiny", messages=messages, tools=tools, tool_choice="none", max_tokens=1
    )
    assert full.usage.prompt_tokens > plain.usage.prompt_tokens + 20  # the tools, the call and its result
    assert full.choices[0].message.tool_calls is None  # "none": nothing parsed


HERMES_CALL = (
    r'Sure\. <tool_call>\{"name": "get_weather", "arguments": \{"city": "(Paris|Oslo)", "days": [1-7]\}\}</tool_call>'
)


def test_auto_tool_choice_reads_the_models_own_format(client):
    """The hermes parser, end to end: the model is made to write a call in Qwen's format (a regex), and the
    server hands it back as a tool call, streamed and not, with the text before it as content."""
    tools = [openai.pydantic_function_tool(Weather, name="get_weather")]
    extra = {"structured_outputs": {"regex": HERMES_CALL}}
    kwargs = dict(model="tiny", messages=USER, tools=tools, max_tokens=200, temperature=0, extra_body=extra)
    whole = client.chat.completions.parse(**kwargs)
    choice = whole.choices[0]
    assert choice.finish_reason == "tool_calls" and choice.message.content == "Sure."
    [call] = choice.message.tool_calls
    assert isinstance(call.function.parsed_arguments, Weather)
    with client.chat.completions.stream(**kwargs) as events:
        streamed = events.get_final_completion()
    assert streamed.choices[0].message.content == "Sure."
    assert streamed.choices[0].message.tool_calls[0].function.arguments == call.function.arguments


DIGIT = {
    "type": "object",
    "properties": {"n": {"type": "integer", "minimum": 0, "maximum": 9}},
    "required": ["n"],
    "additionalProperties": False,
}
TAGGED = re.compile(r'(?:[^ ]| <\{"n":[0-9]\}>)*')
"""Text whose every space starts the structure: with the trigger " ", a random model's spaces all do."""


def _tag(begin: str = " <", trigger: str = " ") -> dict:
    return {"structures": [{"begin": begin, "schema": DIGIT, "end": ">"}], "triggers": [trigger]}


@pytest.mark.parametrize("stream", [False, True])
def test_a_structural_tag_forces_its_structure_wherever_the_model_writes_its_trigger(client, stream):
    """vLLM's structural_tag, in response_format and in structured_outputs (its tag as JSON text): the
    random model writes free text, and each space it writes (the trigger) is followed by the begin's
    rest, a JSON object valid under the schema (compact) and the end."""
    texts = []
    for extra in (
        {"response_format": {"type": "structural_tag", **_tag()}},
        {"extra_body": {"structured_outputs": {"structural_tag": json.dumps(_tag())}}},
    ):
        kwargs = dict(model="tiny", messages=USER, max_tokens=80, temperature=1.0, seed=7, n=2, **extra)
        if stream:
            parts: dict[int, str] = {}
            finish: dict[int, str] = {}
            for chunk in client.chat.completions.create(stream=True, **kwargs):
                for choice in chunk.choices:
                    parts[choice.index] = parts.get(choice.index, "") + (choice.delta.content or "")
                    finish[choice.index] = choice.finish_reason or finish.get(choice.index)
            outcomes = [(parts[i], finish[i]) for i in sorted(parts)]
        else:
            completion = client.chat.completions.create(**kwargs)
            outcomes = [(c.message.content, c.finish_reason) for c in completion.choices]
        for text, reason in outcomes:
            if reason == "length":  # cut off: a structure may be unfinished at the very end
                text = re.sub(r" <[^ >]*$| $", "", text)
            assert TAGGED.fullmatch(text), text
            for match in re.finditer(r" <(\{.*?\})>", text):
                jsonschema.validate(json.loads(match.group(1)), DIGIT)
            texts.append(text)
    assert sum(text.count(" <{") for text in texts) >= 1  # the trigger fired: the test saw a structure


def test_a_whitespace_pattern_sets_the_whitespace_between_json_tokens(client):
    """vLLM's whitespace_pattern (structured_outputs) and guided_whitespace_pattern (with guided_json):
    the JSON may hold that whitespace and no other."""
    from openai.lib._pydantic import to_strict_json_schema

    schema = to_strict_json_schema(Weather)
    texts = []
    for extra in (
        {"structured_outputs": {"json": schema, "whitespace_pattern": "[\n]{0,2}"}},
        {"guided_json": schema, "guided_whitespace_pattern": "[\n]{0,2}"},
    ):
        completion = client.chat.completions.create(
            model="tiny", messages=USER, max_tokens=80, temperature=1.0, seed=3, n=4, extra_body=extra
        )
        for choice in completion.choices:
            text = choice.message.content
            assert choice.finish_reason == "stop", text
            Weather.model_validate_json(text)
            assert {c for c in text if c.isspace()} <= {"\n"} and "\n\n\n" not in text, text
            texts.append(text)
    assert any("\n" in text for text in texts)  # the pattern was used, not the compact default


def test_closed_adds_additional_properties_false_where_a_schema_does_not_say():
    from model_optimizer.runtime.structured.vllm_params import closed

    schema = {
        "type": "object",
        "properties": {
            "properties": {"type": "string"},  # a property so named is a name, not a keyword
            "items": {"type": "array", "items": {"type": "object", "properties": {"a": {}}}},
            "either": {"anyOf": [{"$ref": "#/$defs/x"}, {"type": "object", "additionalProperties": True}]},
        },
        "$defs": {"x": {"properties": {"b": {"type": "integer"}}}},
    }
    out = closed(schema)
    assert out["additionalProperties"] is False and "additionalProperties" not in schema  # a copy
    assert out["properties"]["properties"] == {"type": "string"}
    assert out["properties"]["items"]["items"]["additionalProperties"] is False
    assert out["properties"]["either"]["anyOf"][1]["additionalProperties"] is True  # said: kept
    assert out["$defs"]["x"]["additionalProperties"] is False
    assert closed(True) is True


def test_disable_additional_properties_closes_the_schemas_objects(client):
    """vLLM's disable_additional_properties: the random model, which adds keys of its own to an open
    object, writes only the schema's."""
    open_schema = {"type": "object", "properties": {"n": {"enum": [1, 2]}}, "required": ["n"]}
    texts = {}
    for flag in (False, True):
        extra = {"structured_outputs": {"json": open_schema, "disable_additional_properties": flag}}
        completion = client.chat.completions.create(
            model="tiny", messages=USER, max_tokens=40, temperature=1.0, seed=5, n=4, extra_body=extra
        )
        texts[flag] = [c.message.content for c in completion.choices]
    assert all(text in ('{"n":1}', '{"n":2}') for text in texts[True]), texts[True]
    assert any(text not in ('{"n":1}', '{"n":2}') for text in texts[False])  # open: the model adds keys


BAD = [
    (
        {"response_format": {"type": "json_schema", "json_schema": {"name": "x", "schema": {"not": {}}}}},
        "Unimplemented keys",
        "response_format",
    ),
    (
        {
            "response_format": {
                "type": "json_schema",
                "json_schema": {"name": "x", "schema": {"type": "integer", "minimum": 5, "maximum": 1}},
            }
        },
        "minimum (5) is greater",
        "response_format",
    ),
    (
        {"response_format": {"type": "json_schema", "json_schema": {"name": "x"}}},
        "needs json_schema.schema",
        "response_format",
    ),
    ({"response_format": {"type": "structural_tag"}}, "triggers must be a non-empty list", "response_format"),
    (
        {"response_format": {"type": "structural_tag", "structures": [{"begin": "<g>"}], "triggers": ["<f"]}},
        "starts with none of the triggers",
        "response_format",
    ),
    (
        {
            "response_format": {
                "type": "structural_tag",
                "structures": [{"begin": "<f>", "schema": {"not": {}}, "end": "</f>"}],
                "triggers": ["<f"],
            }
        },
        "Unimplemented keys",
        "response_format",
    ),
    ({"guided_regex": "(?=a)b"}, "look-around", "guided_regex"),
    ({"guided_regex": "(ab{1000}){1000}"}, "fails on its first token", "guided_regex"),  # was a 500 mid-request
    (
        {
            "response_format": {
                "type": "json_schema",
                "json_schema": {
                    "name": "tree",
                    "schema": {
                        "type": "object",
                        "properties": {"children": {"type": "array", "items": {"$ref": "#"}, "minItems": 1}},
                        "required": ["children"],
                    },
                },
            }
        },
        "fails on its first token",
        "response_format",
    ),
    ({"guided_grammar": "start: undefined_rule"}, "invalid grammar", "guided_grammar"),
    ({"guided_choice": []}, "non-empty list", "guided_choice"),
    ({"structured_outputs": {"regex": "a", "choice": ["a"]}}, "exactly one", "structured_outputs"),
    ({"structured_outputs": {"structural_tag": "{}"}}, "triggers must be a non-empty list", "structured_outputs"),
    ({"structured_outputs": {"whitespace_pattern": " *", "regex": "a"}}, "goes with json", "structured_outputs"),
    (
        {"structured_outputs": {"json_object": True, "disable_additional_properties": True}},
        "disable_additional_properties goes with json",
        "structured_outputs",
    ),
    ({"structured_outputs": {"whitespace_pattern": "((", "json_object": True}}, "unclosed group", "structured_outputs"),
    (
        {"guided_whitespace_pattern": " *", "guided_regex": "a"},
        "a JSON response_format alone",
        "guided_whitespace_pattern",
    ),
    ({"guided_regex": "a", "guided_choice": ["a"]}, "one output constraint", "guided_choice"),
    (
        {
            "tools": [{"type": "function", "function": {"name": "f"}}],
            "tool_choice": {"type": "function", "function": {"name": "g"}},
        },
        "not among the tools",
        "tool_choice",
    ),
    (
        {
            "tools": [{"type": "function", "function": {"name": "f"}}],
            "tool_choice": {
                "type": "allowed_tools",
                "allowed_tools": {"mode": "required", "tools": [{"type": "function", "function": {"name": "g"}}]},
            },
        },
        "names 'g', which is not among the tools",
        "tool_choice",
    ),
    (  # allowed_tools' constraint binds, as required's does: the request's own would drop it
        {
            "tools": [{"type": "function", "function": {"name": "f"}}, {"type": "function", "function": {"name": "g"}}],
            "tool_choice": {
                "type": "allowed_tools",
                "allowed_tools": {"mode": "auto", "tools": [{"type": "function", "function": {"name": "g"}}]},
            },
            "response_format": {"type": "json_object"},
        },
        "allowed_tools constrains the output",
        "response_format",
    ),
    (
        {
            "tools": [{"type": "function", "function": {"name": "f"}}],
            "tool_choice": {"type": "allowed_tools", "allowed_tools": {"tools": []}},
        },
        "allowed_tools.mode: Field required",
        "tool_choice",
    ),
    ({"tools": [{"type": "function", "function": {"name": "f"}}], "tool_choice": 3}, "allowed_tools", "tool_choice"),
    (  # as JSON text a schema can nest past the parser's depth, which the body's own parsing refuses too
        {"structured_outputs": {"json": '{"type": "array", "items": ' * 2000 + "{}" + "}" * 2000}},
        "nests too deeply",
        "structured_outputs",
    ),
    (
        {"guided_whitespace_pattern": " ?", "guided_regex": "a"},
        "or a JSON response_format alone",
        "guided_whitespace_pattern",
    ),
    ({"tool_choice": "required"}, "needs tools", "tool_choice"),
    ({"tool_choice": "auto"}, "needs tools", "tool_choice"),  # vLLM's and OpenAI's 400 too
    ({"tools": [{"type": "function", "function": {"name": "f"}}] * 2, "tool_choice": "required"}, "unique", "tools"),
    (
        {
            "tools": [
                {
                    "type": "function",
                    "function": {
                        "name": "f",
                        "parameters": {"type": "object", "properties": {"a": {"type": "array", "uniqueItems": True}}},
                    },
                }
            ],
            "tool_choice": "required",
        },
        "uniqueItems",
        "tools",
    ),
    ({"functions": [{"name": "f"}]}, "use tools", "functions"),
]


@pytest.mark.parametrize(("extra", "reason", "param"), BAD, ids=[b[2] + "-" + b[1][:20] for b in BAD])
def test_bad_constraints_are_400s_with_the_reason_and_the_server_stays_healthy(live, extra, reason, param):
    body = {"model": "tiny", "messages": USER, "max_tokens": 5, **extra}
    r = httpx.post(live.url + "/v1/chat/completions", json=body, timeout=60)
    assert r.status_code == 400, r.text
    error = r.json()["error"]
    assert reason in error["message"] and error["param"] == param, error
    assert httpx.get(live.url + "/health").status_code == 200
    ok = httpx.post(live.url + "/v1/chat/completions", json={**body, **{k: None for k in extra}}, timeout=60)
    assert ok.status_code == 200, ok.text


def test_a_constraint_too_slow_to_validate_is_refused_and_nothing_hangs(live):
    url = live.url + "/v1/chat/completions"
    body = {"model": "tiny", "messages": USER, "max_tokens": 5}
    assert httpx.post(url, json={**body, "guided_regex": "[a-z]"}, timeout=60).status_code == 200
    checker = live.state.grammar_checker
    slow = {**body, "guided_regex": "[a-z]{1,40}@[a-z]{2,9}"}
    for sandbox in checker._sandboxes:  # one so far: the checks were one at a time
        sandbox.timeout_s = 0.0
    try:
        r = httpx.post(url, json=slow, timeout=60)
        assert r.status_code == 400 and "could not validate" in r.json()["error"]["message"]
    finally:
        for sandbox in checker._sandboxes:
            sandbox.timeout_s = 10.0
    assert httpx.post(url, json=slow, timeout=60).status_code == 400  # the verdict is cached
    checker._verdicts.clear()
    assert httpx.post(url, json=slow, timeout=60).status_code == 200  # a fresh process, in time


def test_a_check_whose_client_left_before_it_began_never_runs(live):
    """The check threads must not spend themselves on clients that hung up: a queued check whose every
    client has left is cancelled, and the next request with that constraint has it checked anew."""
    import threading

    from model_optimizer.runtime.server.structured import CHECK_THREADS

    url = live.url + "/v1/chat/completions"
    body = {"model": "tiny", "messages": USER, "max_tokens": 5}
    assert httpx.post(url, json={**body, "guided_regex": "[a-z]"}, timeout=60).status_code == 200  # a checker
    checker = live.state.grammar_checker
    checked: list[str] = []
    check = checker._check
    checker._check = lambda so: checked.append(so.spec) or check(so)
    gate = threading.Event()
    blockers = [checker._threads.submit(gate.wait) for _ in range(CHECK_THREADS)]  # every check thread busy:
    # the next check waits in the queue
    left = {**body, "guided_regex": "[a-z]{3}left"}
    try:
        with pytest.raises(httpx.ReadTimeout):
            httpx.post(url, json=left, timeout=0.5)  # gives up and hangs up while its check is queued
        deadline = time.monotonic() + 10
        while checker._pending and time.monotonic() < deadline:  # the server saw the hang-up
            time.sleep(0.05)
    finally:
        gate.set()
        for blocker in blockers:
            blocker.result(timeout=60)
        checker._check = check
    assert "[a-z]{3}left" not in checked and not checker._pending
    assert httpx.post(url, json=left, timeout=60).status_code == 200  # checked now
    assert httpx.get(live.url + "/health").status_code == 200


@pytest.mark.parametrize(
    "constraint",
    [
        {"response_format": {"type": "json_schema", "json_schema": {"name": "x", "schema": {"const": -(2**63)}}}},
        {
            "structured_outputs": {
                "grammar": "start: r0\n" + "\n".join(f'r{i}: "x" r{i + 1} | "y"' for i in range(5000)) + '\nr5000: "z"'
            }
        },  # fmt: skip
    ],
    ids=["int64-min-const", "5000-chained-rules"],
)
def test_a_constraint_that_crashes_the_grammar_engine_costs_one_request(live, constraint):
    """llguidance 1.9.1 dies on these (a segfault, a stack overflow) while it checks them: the check runs in
    a process of its own, so the request gets a 400 and the server and its other requests go on."""
    url = live.url + "/v1/chat/completions"
    body = {"model": "tiny", "messages": USER, "max_tokens": 5}
    r = httpx.post(url, json={**body, **constraint}, timeout=120)
    assert r.status_code in (200, 400), r.text  # 200 once llguidance takes them; never a dead server
    assert httpx.get(live.url + "/health").status_code == 200
    assert httpx.post(url, json={**body, "guided_choice": ["yes", "no"]}, timeout=60).status_code == 200


@pytest.mark.parametrize("stream", [False, True])
def test_a_constraint_that_outgrows_the_grammar_engine_mid_output_is_a_400(live, stream):
    """501 optional properties make a parser row of more than llguidance's 2,000 items: met only once the
    output reaches that object, after the check of the first token passed. The request's doing: a 400
    (in the stream, an error of that code), not a 500 that clients retry."""
    wide = {"type": "object", "properties": {f"p{i}": {"type": "integer"} for i in range(501)}}
    schema = {"type": "object", "properties": {"a": {"type": "string", "maxLength": 2}, "b": wide}}
    schema |= {"required": ["a", "b"], "additionalProperties": False}
    body = {"model": "tiny", "messages": USER, "max_tokens": 60, "stream": stream}
    body["response_format"] = {"type": "json_schema", "json_schema": {"name": "x", "schema": schema}}
    r = httpx.post(live.url + "/v1/chat/completions", json=body, timeout=120)
    if stream:
        errors = [json.loads(line[6:]) for line in r.text.splitlines() if line.startswith('data: {"error"')]
        assert r.status_code == 200 and len(errors) == 1, r.text
        error = errors[0]["error"]
    else:
        assert r.status_code == 400, r.text
        error = r.json()["error"]
    assert error["code"] == 400 and error["type"] == "invalid_request_error"
    assert error["message"].startswith("the constraint went past the grammar engine's limits: "), error
    assert httpx.get(live.url + "/health").status_code == 200
    text = {"format": {"type": "json_schema", "name": "x", "schema": schema}}
    body = {"model": "tiny", "input": "hi", "max_output_tokens": 60, "text": text, "stream": stream}
    r = httpx.post(live.url + "/v1/responses", json=body, timeout=120)
    if stream:  # response.failed, its code the Responses API's for a request's fault
        failed = [json.loads(line[6:]) for line in r.text.splitlines() if '"response.failed"' in line]
        assert failed and failed[0]["response"]["error"]["code"] == "invalid_prompt", r.text
    else:
        assert r.status_code == 400 and "went past the grammar engine's limits" in r.json()["error"]["message"]


def test_thousands_of_choices_are_one_lexeme():
    """Choices compile to one regex: as Lark alternatives, more than 2,000 overflowed llguidance's parser
    row at the first token (a 500 mid-request)."""
    import llguidance as llg

    from model_optimizer.assets import reference_model_path
    from model_optimizer.runtime.models.tokenizer import load_tokenizer
    from model_optimizer.runtime.structured.grammar import check, ll_tokenizer
    from model_optimizer.runtime.structured.params import StructuredOutputs

    tokenizer = load_tokenizer(reference_model_path())
    ll = ll_tokenizer(tokenizer, len(tokenizer), frozenset({2}))
    options = [f"label{i}" for i in range(4000)] + ["a.b*", "(x|y)", "back\\slash", "new\nline", "ü日本", "-#&~/"]
    grammar = check(StructuredOutputs.choice(options), ll)
    for text in ("label3999", "label7", "a.b*", "(x|y)", "back\\slash", "new\nline", "ü日本", "-#&~/"):
        matcher = llg.LLMatcher(ll, grammar)
        tokens = tokenizer.encode(text, add_special_tokens=False)
        assert matcher.try_consume_tokens(tokens) == len(tokens) and matcher.is_accepting(), text
        assert not matcher.is_error()
    for text in ("label4000", "a.bb", "x"):
        matcher = llg.LLMatcher(ll, grammar)
        tokens = tokenizer.encode(text, add_special_tokens=False)
        assert matcher.try_consume_tokens(tokens) < len(tokens) or not matcher.is_accepting(), text


def test_auto_tool_choice_needs_the_servers_flags(server):
    """The shared server runs without --enable-auto-tool-choice: tools with the default tool_choice are a
    400 naming the flags, as in vLLM; "none" and "required" work."""
    body = {"messages": USER, "max_tokens": 40, "tools": [{"type": "function", "function": {"name": "f"}}]}
    r = httpx.post(server.url + "/v1/chat/completions", json=body, timeout=60)
    assert r.status_code == 400 and "--enable-auto-tool-choice" in r.json()["error"]["message"]
    for choice in ("none", "required"):
        r = httpx.post(server.url + "/v1/chat/completions", json={**body, "tool_choice": choice}, timeout=60)
        assert r.status_code == 200, r.text
    assert r.json()["choices"][0]["message"]["tool_calls"][0]["function"] == {"name": "f", "arguments": "{}"}


def test_a_thinking_budget_needs_a_reasoning_parser(live):
    body = {"model": "tiny", "messages": USER, "max_tokens": 5, "thinking_token_budget": 8}
    r = httpx.post(live.url + "/v1/chat/completions", json=body, timeout=60)
    assert r.status_code == 400 and "--reasoning-parser" in r.json()["error"]["message"]


def test_continue_final_message_through_the_server(live):
    messages = [*USER, {"role": "assistant", "content": '{"x": '}]
    body = {"model": "tiny", "messages": messages, "max_tokens": 5, "continue_final_message": True}
    r = httpx.post(live.url + "/v1/chat/completions", json={**body, "add_generation_prompt": False}, timeout=60)
    assert r.status_code == 200, r.text
    r = httpx.post(live.url + "/v1/chat/completions", json=body, timeout=60)  # add_generation_prompt defaults true
    assert r.status_code == 400 and "add_generation_prompt false" in r.json()["error"]["message"]


def test_echo_starts_the_answer_with_the_prefill_it_continues(live):
    """vLLM's chat echo: the answer's content begins with the last message's when it has the answer's role,
    whole and streamed (after the role chunk); a user's last message is not echoed."""
    messages = [*USER, {"role": "assistant", "content": '{"x": '}]
    body = {"messages": messages, "max_tokens": 4, "temperature": 0, "ignore_eos": True, "echo": True}
    body |= {"continue_final_message": True, "add_generation_prompt": False}
    whole = httpx.post(live.url + "/v1/chat/completions", json=body, timeout=60).json()
    plain = httpx.post(live.url + "/v1/chat/completions", json=body | {"echo": False}, timeout=60).json()
    content = whole["choices"][0]["message"]["content"]
    assert content == '{"x": ' + plain["choices"][0]["message"]["content"]
    events = sse_events(httpx.post(live.url + "/v1/chat/completions", json=body | {"stream": True}, timeout=60))
    assert "".join(e["choices"][0]["delta"].get("content") or "" for e in events if e["choices"]) == content
    question = httpx.post(
        live.url + "/v1/chat/completions",
        json={**body, "messages": USER, "continue_final_message": False, "add_generation_prompt": True},
        timeout=60,
    ).json()
    assert not question["choices"][0]["message"]["content"].startswith(USER[0]["content"])


def test_the_newer_structural_tag_format_through_the_server(client):
    """vLLM's {"type": "structural_tag", "format": ...}: here a list of tagged digits and nothing else, which
    the random model can only write through the constraint, in response_format and in structured_outputs."""
    tag = {"type": "tag", "begin": "<", "content": {"type": "json_schema", "json_schema": DIGIT}, "end": ">"}
    fmt = {"type": "tags_with_separator", "tags": [tag], "separator": ",", "at_least_one": True}
    for extra in (
        {"response_format": {"type": "structural_tag", "format": fmt}},
        {
            "extra_body": {
                "structured_outputs": {"structural_tag": json.dumps({"type": "structural_tag", "format": fmt})}
            }
        },
    ):
        choice = client.chat.completions.create(
            model="tiny", messages=USER, max_tokens=60, temperature=0, **extra
        ).choices[0]
        text = choice.message.content
        if choice.finish_reason == "length":  # cut off: a structure may be unfinished at the very end
            text = re.sub(r",(<[^>]*)?$", "", text)
        assert re.fullmatch(r'<\{"n":[0-9]\}>(,<\{"n":[0-9]\}>)*', text), text
    bad = {"type": "structural_tag", "format": {"type": "token_dispatch"}}
    with pytest.raises(openai.BadRequestError, match="not supported"):
        client.chat.completions.create(model="tiny", messages=USER, max_tokens=5, response_format=bad)


def test_the_servers_checks_know_the_models_end_tokens(live, server):
    """generation_config's EOS ids, as the engine core has them, reach the server's constraint checks."""
    assert live.state.model.eos_token_ids == tuple(sorted(live.state.llm.engine.info.eos_token_ids))
    assert server.state.model.eos_token_ids


def _framing_parsers() -> list[str]:
    from model_optimizer.runtime.server.tool_parser_registry import PARSERS

    return sorted(name for name, parser in PARSERS.items() if parser().call_frame("f") is not None)


@pytest.mark.parametrize("name", _framing_parsers())
def test_a_framed_call_written_with_the_formats_tokens_is_taken(name, tmp_path):
    """Strict tools' structural tag, for every format that frames a call, with the markers as the tokenizer's
    added tokens (as the models have them): the call the frame describes is taken, one with arguments outside
    the schema is not. Triggers of several tokens (internlm's) or text and tokens end the free text."""
    from model_optimizer.runtime.server.tool_parser_registry import PARSERS
    from model_optimizer.runtime.server.tools import _framed_calls
    from tests.runtime.structured.test_grammar import _matching

    tool = openai.pydantic_function_tool(Weather, name="get_weather")
    request = ChatCompletionRequest.model_validate({"messages": USER, "tools": [tool]})
    parser = PARSERS[name]([tool])
    _, begin, end = parser.call_frame("get_weather")
    taken = _matching(tmp_path, sorted(set(re.findall(r"<[^<>]+>", begin + end))))
    constraint = _framed_calls(request.tools, parser)
    assert taken(constraint, "Sure. " + begin + '{"city":"Oslo","days":2}' + end)
    assert not taken(constraint, "Sure. " + begin + '{"city":"Rome","days":2}' + end)
