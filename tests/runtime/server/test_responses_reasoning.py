"""/v1/responses with `--reasoning-parser qwen3` (the thinking server of test_reasoning_outputs.py): the
reasoning item, whole and streamed, and a stream rebuilt as OpenAI's SDKs rebuild one: each item added
empty, each content part appended on response.content_part.added, each delta added to its part."""

from __future__ import annotations

import json

import httpx
import openai
import pytest
from pydantic import BaseModel, Field

from tests.runtime.server.live import sse_payloads
from tests.runtime.server.test_reasoning_outputs import ends_thinking, live, thinking_model  # noqa: F401

DIGIT = {
    "type": "object",
    "properties": {"n": {"type": "integer", "minimum": 0, "maximum": 9}},
    "required": ["n"],
    "additionalProperties": False,
}
FORMAT = {"format": {"type": "json_schema", "name": "digit", "schema": DIGIT, "strict": True}}
TEXT_EVENTS = {"message": "response.output_text", "reasoning": "response.reasoning_text"}


class Digit(BaseModel):
    n: int = Field(ge=0, le=9)


@pytest.fixture(scope="module")
def body(ends_thinking):  # noqa: F811
    """Thinking that ends (logit_bias on `</think>`, seeded), then a digit as JSON: a response that completes."""
    return {"model": "tiny", "input": "pick a digit", "logit_bias": ends_thinking, "temperature": 1.0, "seed": 3,
            "max_output_tokens": 120, "text": FORMAT}  # fmt: skip


def _stream(live, body) -> list[dict]:  # noqa: F811
    r = httpx.post(live.url + "/v1/responses", json={**body, "stream": True}, timeout=60)
    assert r.status_code == 200, r.text
    return [json.loads(p) for p in sse_payloads(r)]


def _rebuilt(events: list[dict]) -> list[dict]:
    """The output as OpenAI's SDKs accumulate it from the events (the TypeScript SDK's rules)."""
    output: list[dict] = []
    for e in events:
        if e["type"] == "response.output_item.added":
            output.append(json.loads(json.dumps(e["item"])))
        elif e["type"] == "response.content_part.added":
            output[e["output_index"]]["content"].append(dict(e["part"]))
        elif e["type"] in ("response.output_text.delta", "response.reasoning_text.delta"):
            output[e["output_index"]]["content"][e["content_index"]]["text"] += e["delta"]
        elif e["type"] == "response.function_call_arguments.delta":
            output[e["output_index"]]["arguments"] += e["delta"]
        elif e["type"] == "response.output_item.done":
            output[e["output_index"]]["status"] = e["item"]["status"]
    return output


def test_a_streamed_reasoning_item_adds_its_part_as_a_message_does(live, body):  # noqa: F811
    events = _stream(live, body)
    final = events[-1]["response"]
    assert events[-1]["type"] == "response.completed" and final["status"] == "completed"
    assert [item["type"] for item in final["output"]] == ["reasoning", "message"]
    for index, item in enumerate(final["output"]):
        mine = [e["type"] for e in events if e.get("output_index") == index]
        text = TEXT_EVENTS[item["type"]]
        num_deltas = mine.count(f"{text}.delta")
        assert num_deltas >= 1 and mine == [
            "response.output_item.added",
            "response.content_part.added",
            *[f"{text}.delta"] * num_deltas,
            f"{text}.done",
            "response.content_part.done",
            "response.output_item.done",
        ]
        [added] = [e for e in events if e["type"] == "response.output_item.added" and e["output_index"] == index]
        assert added["item"]["content"] == []  # the part comes with content_part.added: one part, not two
    assert _rebuilt(events) == final["output"]
    Digit.model_validate_json(final["output"][1]["content"][0]["text"])
    assert final["usage"]["output_tokens_details"]["reasoning_tokens"] > 0


def test_the_whole_response_has_the_streams_items(live, body):  # noqa: F811
    # the prompt's blocks cached first, so both answers count the same cached tokens whatever ran before
    # on this server (it is shared within the module: run first, the whole answer cached none, the stream 16)
    httpx.post(live.url + "/v1/responses", json=body, timeout=60).raise_for_status()
    whole = httpx.post(live.url + "/v1/responses", json=body, timeout=60).json()
    final = _stream(live, body)[-1]["response"]

    def strip(output):
        return [{k: v for k, v in item.items() if k != "id"} for item in output]

    assert strip(whole["output"]) == strip(final["output"])  # seeded: the same tokens
    assert whole["usage"] == final["usage"]


def test_the_clients_stream_helper_keeps_the_reasoning(live, body):  # noqa: F811
    client = openai.OpenAI(base_url=live.url + "/v1", api_key="unused", max_retries=0)
    extra = {k: body[k] for k in ("logit_bias", "seed")}
    kwargs = dict(model="tiny", input=body["input"], temperature=1.0, max_output_tokens=120, extra_body=extra)
    with client.responses.stream(text_format=Digit, **kwargs) as stream:
        kinds = [event.type for event in stream]
        final = stream.get_final_response()
    assert kinds[-1] == "response.completed" and isinstance(final.output_parsed, Digit)
    [reasoning] = [item for item in final.output if item.type == "reasoning"]
    assert reasoning.content and reasoning.content[0].text
    assert reasoning.content[0].type == "reasoning_text" and reasoning.status == "completed"


def test_an_output_sent_back_puts_the_thinking_on_its_turn(live, body):  # noqa: F811
    """The agent loop: the response's reasoning and message items sent back as input are one assistant turn
    with its thinking (the template shows it), so the prompt grows by that turn."""
    first = httpx.post(live.url + "/v1/responses", json=body, timeout=60).json()
    follow = {"model": "tiny", "max_output_tokens": 1, "reasoning": {"effort": "none"}}
    with_thinking = [
        {"role": "user", "content": "pick a digit"},
        *first["output"],
        {"role": "user", "content": "again"},
    ]
    without = [item for item in with_thinking if item.get("type") != "reasoning"]
    tokens = [
        httpx.post(live.url + "/v1/responses", json={**follow, "input": items}, timeout=60).json()["usage"]
        for items in (with_thinking, without)
    ]
    assert tokens[0]["input_tokens"] > tokens[1]["input_tokens"]


@pytest.mark.parametrize(
    "extra",
    [
        {"chat_template_kwargs": {"enable_thinking": False}},  # the template closes the block: no thinking
        {"thinking_token_budget": 2},  # the end tag forced after two tokens of thinking
        {"stop_token_ids": [0], "skip_special_tokens": False, "priority": 1},
    ],
)
def test_vllms_chat_extras_reach_the_chat_it_amounts_to(live, extra):  # noqa: F811
    """vLLM's extras that chat takes act on a response as on chat (the request model ignores unknown fields,
    so one left out would be dropped without a word): same prompt, same reasoning tokens at temperature 0."""
    common = {"model": "tiny", "temperature": 0, **extra}
    r = httpx.post(live.url + "/v1/responses", json={**common, "input": "pick a digit", "max_output_tokens": 8},
                   timeout=60)  # fmt: skip
    chat = httpx.post(live.url + "/v1/chat/completions", json={**common, "max_tokens": 8,
                      "messages": [{"role": "user", "content": "pick a digit"}]}, timeout=60)  # fmt: skip
    assert r.status_code == chat.status_code == 200, r.text
    usage, chat_usage = r.json()["usage"], chat.json()["usage"]
    assert usage["input_tokens"] == chat_usage["prompt_tokens"]
    assert usage["output_tokens"] == chat_usage["completion_tokens"]
    reasoning = chat.json()["choices"][0]["message"].get("reasoning_content") or ""
    items = {item["type"]: item for item in r.json()["output"]}
    assert (items["reasoning"]["content"][0]["text"] if "reasoning" in items else "") == reasoning


def test_a_chat_template_in_the_request_is_chats_400(live):  # noqa: F811
    body = {"model": "tiny", "input": "hi", "chat_template": "{{ messages }}"}
    r = httpx.post(live.url + "/v1/responses", json=body, timeout=60)
    assert r.status_code == 400 and r.json()["error"]["param"] == "chat_template", r.text
