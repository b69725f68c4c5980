"""ResponsesFormat without a server: how a generation's end (finish_reason) becomes a response's status, whole
and streamed, checked against the openai package's types."""

from __future__ import annotations

import json

import pytest
from openai.types.responses import Response, ResponseStreamEvent
from pydantic import TypeAdapter

from model_optimizer.runtime.engine.detokenizer import TokenTexts
from model_optimizer.runtime.engine.outputs import CompletionOutput, RequestOutput
from model_optimizer.runtime.server.chat_format import ChatFormat
from model_optimizer.runtime.server.protocol_outputs import UsageInfo
from model_optimizer.runtime.server.protocol_responses import ResponsesRequest
from model_optimizer.runtime.server.responses_output import ResponsesFormat
from model_optimizer.runtime.server.streaming import ChoiceDelta
from model_optimizer.runtime.server.tools import ToolPlan

USAGE = UsageInfo(prompt_tokens=3, completion_tokens=2, total_tokens=5)


def _format(stream: bool) -> ResponsesFormat:
    body = ResponsesRequest.model_validate({"model": "tiny", "input": "hi", "stream": stream})
    chat = ChatFormat(body.to_chat(), "resp_1", "tiny", TokenTexts(None), ToolPlan())
    return ResponsesFormat(body, chat, "resp_1")


def _streamed(finish_reason: str) -> list[dict]:
    fmt = _format(stream=True)
    events = [json.loads(e.model_dump_json()) for e in fmt.head()]
    for i, (text, finish) in enumerate((("Hel", None), ("lo", finish_reason))):
        out = fmt.chunk([ChoiceDelta(0, CompletionOutput(0, text, [i], None, finish), i == 0)])
        events += [json.loads(line[6:]) for line in (out or b"").decode().splitlines() if line.startswith("data: ")]
    return [*events, json.loads(fmt.usage_chunk(USAGE).model_dump_json())]


def _whole(finish_reason: str) -> dict:
    final = RequestOutput("resp_1", None, [1, 2, 3], [CompletionOutput(0, "Hello", [4, 5], None, finish_reason)], True)
    return _format(stream=False).response([final], USAGE).model_dump()


@pytest.mark.parametrize(
    ("finish_reason", "status", "item_status", "closing"),
    [
        ("stop", "completed", "completed", "response.completed"),
        ("length", "incomplete", "incomplete", "response.incomplete"),
        # the server aborted it (a drain that ran out of time): a cut text is never "completed"
        ("abort", "failed", "incomplete", "response.failed"),
    ],
)
def test_a_generations_end_is_the_responses_status(finish_reason, status, item_status, closing):
    whole, events = _whole(finish_reason), _streamed(finish_reason)
    TypeAdapter(list[ResponseStreamEvent]).validate_python(events)
    streamed = events[-1]["response"]
    assert events[-1]["type"] == closing
    for response in (whole, streamed):
        Response.model_validate(response, strict=False)
        assert response["status"] == status and response["output"][0]["status"] == item_status
        assert response["output"][0]["content"][0]["text"] == "Hello"
        assert response["incomplete_details"] == ({"reason": "max_output_tokens"} if status == "incomplete" else None)
        assert response["usage"]["output_tokens"] == 2
        if status == "failed":
            assert response["error"]["code"] == "server_error" and "aborted" in response["error"]["message"]
        else:
            assert response["error"] is None
