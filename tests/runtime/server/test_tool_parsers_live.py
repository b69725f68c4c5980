"""`--tool-call-parser qwen3_coder`, `xlam`, `minimax`, `internlm` and `openai` end to end: a live server on the tiny
Qwen3 and the `openai` client.

The random model is made to write a call in each format by a regex constraint (as
test_structured_outputs.py does for hermes): Qwen3-Coder's key/value tags, xLAM's fenced JSON list,
MiniMax-M1's JSON lines in tags, InternLM2's action block (special tokens in InternLM2), gpt-oss's harmony
commentary message to `functions.lookup`. The server must hand it back as a tool call whose arguments are JSON typed by the tool's schema, streamed
and not: `code` holds digits yet stays a string, as its schema says (for qwen3_coder the request's
tools reach the parser), and `days` is a number; the text before the call is the content.
"""

from __future__ import annotations

import json

import openai
import pytest
from pydantic import BaseModel, Field

from tests.runtime.server.test_structured_outputs import USER, start_tools_server


class Lookup(BaseModel):
    code: str
    days: int = Field(ge=1, le=7)


CALLS = {
    "qwen3_coder": (
        r"Sure\. <tool_call>\n<function=lookup>\n<parameter=code>\n[0-9]{2}\n</parameter>\n"
        r"<parameter=days>\n[1-7]\n</parameter>\n</function>\n</tool_call>"
    ),
    "xlam": r'Sure\.\n```json\n\[\{"name": "lookup", "arguments": \{"code": "[0-9]{2}", "days": [1-7]\}\}\]\n```',
    "minimax": r'Sure\.\n<tool_calls>\n\{"name": "lookup", "arguments": \{"code": "[0-9]{2}", "days": [1-7]\}\}\n</tool_calls>',
    "internlm": (
        r'Sure\.<\|action_start\|><\|plugin\|>\n\{"name": "lookup", "parameters": '
        r'\{"code": "[0-9]{2}", "days": [1-7]\}\}<\|action_end\|>'
    ),
    "openai": (
        r"Sure\.<\|start\|>assistant<\|channel\|>commentary to=functions\.lookup <\|constrain\|>json<\|message\|>"
        r'\{"code": "[0-9]{2}", "days": [1-7]\}<\|call\|>'
    ),
}
"""Per parser: a regex of one call to `lookup` in its format, after the text "Sure."."""


@pytest.fixture(scope="module", params=sorted(CALLS))
def parser_client(request, tiny_model, tmp_path_factory):
    server = start_tools_server(tiny_model, tmp_path_factory, 128, 4, tool_call_parser=request.param)
    yield request.param, openai.OpenAI(base_url=server.url + "/v1", api_key="unused", max_retries=0)
    server.stop()


def test_calls_come_back_typed_whole_and_streamed(parser_client):
    parser, client = parser_client
    tools = [openai.pydantic_function_tool(Lookup, name="lookup")]
    extra = {"structured_outputs": {"regex": CALLS[parser]}}
    kwargs = dict(model="tiny", messages=USER, tools=tools, max_tokens=200, temperature=0, extra_body=extra)
    whole = client.chat.completions.parse(**kwargs)
    choice = whole.choices[0]
    assert choice.finish_reason == "tool_calls" and choice.message.content == "Sure."
    [call] = choice.message.tool_calls
    arguments = json.loads(call.function.arguments)
    assert type(arguments["code"]) is str and type(arguments["days"]) is int  # typed by the schema
    assert isinstance(call.function.parsed_arguments, Lookup)
    with client.chat.completions.stream(**kwargs) as events:
        streamed = events.get_final_completion()
    message = streamed.choices[0].message
    assert streamed.choices[0].finish_reason == "tool_calls" and message.content == "Sure."
    assert [(c.function.name, c.function.arguments) for c in message.tool_calls] == [
        ("lookup", call.function.arguments)
    ]
    # while the parser holds text back (inside the call's markers) no chunk is sent: each one carries news
    chunks = list(client.chat.completions.create(**kwargs, stream=True))
    assert chunks and all(len(c.choices) == 1 for c in chunks)
    empty = [c for c in chunks if not (c.choices[0].delta.model_dump(exclude_none=True) or c.choices[0].finish_reason)]
    assert empty == []


def test_allowed_tools_auto_needs_a_format_that_frames_a_call(parser_client):
    """Mode auto with some of the tools constrains the calls: a structural tag in formats that frame a call
    (minimax, internlm), a 400 saying so in those that cannot (qwen3_coder's key/value tags, xlam's list)."""
    parser, client = parser_client
    tools = [openai.pydantic_function_tool(Lookup, name="lookup"), openai.pydantic_function_tool(Lookup, name="other")]
    choice = {
        "type": "allowed_tools",
        "allowed_tools": {"mode": "auto", "tools": [{"type": "function", "function": {"name": "lookup"}}]},
    }
    kwargs = dict(model="tiny", messages=USER, tools=tools, tool_choice=choice, max_tokens=8)
    if parser in ("minimax", "internlm"):
        assert client.chat.completions.create(**kwargs).choices[0].finish_reason in ("stop", "length", "tool_calls")
    else:
        with pytest.raises(openai.BadRequestError, match="cannot frame"):
            client.chat.completions.create(**kwargs)
