"""What an agent ported from vLLM relies on in tool calling, through a live server and the `openai` client.

- A named tool_choice behind a reasoning parser: the reasoning streams first, then the call (its id, type and
  name with its first argument characters); an output cut while thinking has no call at all (vLLM returns
  none, where a call with empty arguments would break the agent's `json.loads`).
- hermes reads calls whose `<tool_call>` tags are special tokens in the model's tokenizer: the text keeps
  them (skip_special_tokens off), as vLLM's hermes parser has it.
- Call ids stay unique across the conversation: Kimi-K2's ids count calls (`functions.NAME:INDEX`), and the
  server's ids for a forced call count on from the calls earlier assistant messages made, as vLLM's do.

The tiny random models never think or call by themselves: `thinking_token_budget` ends the thinking (the
thinking model of test_reasoning_outputs.py), and tool_choice forces the calls.
"""

from __future__ import annotations

import json

import openai
import pytest

from model_optimizer.runtime.server.config import ServerConfig
from tests.runtime.server.live import start_server
from tests.runtime.server.test_reasoning_outputs import DIGIT, USER, live, thinking_model  # noqa: F401 - fixtures
from tests.runtime.server.test_structured_outputs import start_tools_server

PICK = [{"type": "function", "function": {"name": "pick", "parameters": DIGIT}}]
NAMED = {"type": "function", "function": {"name": "pick"}}


@pytest.fixture(scope="module")
def thinking_client(live):  # noqa: F811 - the imported fixture
    """The thinking model behind `--reasoning-parser qwen3` and hermes: test_reasoning_outputs' server."""
    return openai.OpenAI(base_url=live.url + "/v1", api_key="unused", max_retries=0)


def _named_kwargs(max_tokens: int) -> dict:
    return dict(
        model="tiny",
        messages=USER,
        tools=PICK,
        tool_choice=NAMED,
        temperature=0,
        max_tokens=max_tokens,
        extra_body={"thinking_token_budget": 3},
    )


def test_a_named_call_streams_after_the_reasoning(thinking_client):
    chunks = list(thinking_client.chat.completions.create(stream=True, **_named_kwargs(60)))
    deltas = [c.choices[0].delta for c in chunks if c.choices]
    thinking = [i for i, d in enumerate(deltas) if getattr(d, "reasoning", None)]
    calling = [i for i, d in enumerate(deltas) if d.tool_calls]
    assert thinking and calling and max(thinking) < min(calling)  # reasoning first, then the call
    first = deltas[calling[0]].tool_calls[0]
    assert first.id and first.type == "function" and first.function.name == "pick" and first.function.arguments
    assert all(
        d.tool_calls[0].id is None and d.tool_calls[0].function.name is None
        for d in deltas[calling[0] + 1 :]
        if d.tool_calls
    )
    streamed = "".join(d.tool_calls[0].function.arguments or "" for d in deltas if d.tool_calls)
    whole = thinking_client.chat.completions.create(**_named_kwargs(60)).choices[0]
    assert whole.finish_reason == "stop" and whole.message.tool_calls[0].function.arguments == streamed
    assert 0 <= json.loads(streamed)["n"] <= 9


def test_an_output_cut_while_thinking_has_no_named_call(thinking_client):
    """max_tokens ends the output inside the reasoning: no call, whole or streamed (vLLM returns none)."""
    whole = thinking_client.chat.completions.create(**_named_kwargs(2)).choices[0]
    assert whole.finish_reason == "length" and whole.message.reasoning
    assert not whole.message.tool_calls and whole.message.content is None
    chunks = list(thinking_client.chat.completions.create(stream=True, **_named_kwargs(2)))
    assert not any(c.choices[0].delta.tool_calls for c in chunks if c.choices)
    assert chunks[-1].choices[0].finish_reason == "length"


@pytest.fixture(scope="module")
def kimi_client(tiny_model, tmp_path_factory):
    server = start_tools_server(tiny_model, tmp_path_factory, 64, 4, tool_call_parser="kimi_k2")
    yield openai.OpenAI(base_url=server.url + "/v1", api_key="unused", max_retries=0)
    server.stop()


def _history(call_ids: list[str]) -> list[dict]:
    """A conversation whose assistant turns made calls with these ids, each answered by a tool message."""
    messages = list(USER)
    for call_id in call_ids:
        call = {"id": call_id, "type": "function", "function": {"name": "pick", "arguments": '{"n": 1}'}}
        messages += [
            {"role": "assistant", "content": None, "tool_calls": [call]},
            {"role": "tool", "tool_call_id": call_id, "content": "ok"},
        ]
    return messages


@pytest.mark.parametrize("stream", [False, True])
def test_kimi_ids_of_forced_calls_count_on_from_the_conversation(kimi_client, stream):
    kwargs = dict(model="tiny", tools=PICK, tool_choice="required", max_tokens=60, temperature=0)
    kwargs["parallel_tool_calls"] = False
    first = kimi_client.chat.completions.create(messages=USER, **kwargs).choices[0].message.tool_calls
    assert [c.id for c in first] == ["functions.pick:0"]
    messages = _history(["functions.pick:0", "functions.pick:1"])
    if stream:
        with kimi_client.chat.completions.stream(messages=messages, **kwargs) as events:
            calls = events.get_final_completion().choices[0].message.tool_calls
    else:
        calls = kimi_client.chat.completions.create(messages=messages, **kwargs).choices[0].message.tool_calls
    assert [c.id for c in calls] == ["functions.pick:2"]  # the third call of the conversation


QWEN35_CALL = "<tool_call>\n<function=pick>\n<parameter=n>\n7\n</parameter>\n</function>\n</tool_call>"


def test_a_qwen35_call_begun_inside_the_thinking_ends_it():
    """Qwen3.5 (`--reasoning-parser qwen3 --tool-call-parser qwen3_coder`, its template opening the block) may
    begin its call without closing the block: the call ends the reasoning and is a call, whole and streamed,
    as vLLM reads it; a `<tool_call>` only mentioned in the thinking stays reasoning. (A random model cannot be
    made to write inside its free thinking, so this is the server's own ChatOutput, fed the text.)"""
    from model_optimizer.runtime.server.chat_output import ChatOutput
    from model_optimizer.runtime.server.reasoning import OPEN, Qwen3ReasoningParser
    from model_optimizer.runtime.server.tool_parsers_kv import Qwen3CoderParser

    text = "I should use <tool_call> here.\n\n" + QWEN35_CALL

    def output() -> ChatOutput:
        return ChatOutput(Qwen3ReasoningParser(OPEN), Qwen3CoderParser(PICK))

    whole = output().message(text)
    assert whole.reasoning_content == "I should use <tool_call> here.\n\n" and whole.content is None
    assert [(c["function"]["name"], c["function"]["arguments"]) for c in whole.tool_calls] == [("pick", '{"n": 7}')]
    streamed = output()
    deltas = [streamed.feed(piece) for piece in text] + [streamed.finish()]
    assert "".join(d.get("reasoning", "") for d in deltas) == whole.reasoning_content
    assert not any(d.get("content") for d in deltas)
    [header] = [call for d in deltas for call in d.get("tool_calls", []) if "id" in call]
    assert header["function"]["name"] == "pick"
    unended = output().message("I should use <tool_call> here, then answer.")
    assert unended.reasoning_content and not unended.tool_calls  # a mention, not a call


@pytest.fixture(scope="module")
def special_tags_client(tiny_model, tmp_path_factory):
    """hermes on a tokenizer whose `<tool_call>` and `</tool_call>` are special tokens (as some models ship
    them): skipped from the text, the parser would never see a call."""
    import shutil

    from transformers import PreTrainedTokenizerFast

    from model_optimizer import LLM
    from tests.runtime.server.test_structured_outputs import TOOLS_TEMPLATE

    folder = tmp_path_factory.mktemp("special_tags") / "qwen3"
    shutil.copytree(tiny_model("qwen3"), folder)
    tokenizer = PreTrainedTokenizerFast.from_pretrained(str(folder))
    tokenizer.add_special_tokens({"additional_special_tokens": ["<tool_call>", "</tool_call>"]})
    tokenizer.chat_template = TOOLS_TEMPLATE
    tokenizer.save_pretrained(str(folder))
    ids = tokenizer.convert_tokens_to_ids(["<tool_call>", "</tool_call>"])
    llm = LLM(str(folder), max_model_len=512, num_kv_blocks=64, max_num_seqs=4)
    server = start_server(
        llm, ServerConfig(served_model_name="tiny", enable_auto_tool_choice=True, tool_call_parser="hermes")
    )
    yield openai.OpenAI(base_url=server.url + "/v1", api_key="unused", max_retries=0), ids
    server.stop()


@pytest.mark.parametrize("stream", [False, True])
def test_hermes_reads_calls_whose_tags_are_special_tokens(special_tags_client, stream):
    client, ids = special_tags_client
    regex = r'Sure\. <tool_call>\{"name": "pick", "arguments": \{"n": [0-9]\}\}</tool_call>'
    kwargs = dict(
        model="tiny",
        messages=USER,
        tools=PICK,
        max_tokens=60,
        temperature=0,
        logit_bias={str(i): 50 for i in ids},  # the tags as their tokens, not spelled out
        extra_body={"structured_outputs": {"regex": regex}},
    )
    if stream:
        with client.chat.completions.stream(**kwargs) as events:
            choice = events.get_final_completion().choices[0]
    else:
        choice = client.chat.completions.create(**kwargs).choices[0]
    assert choice.finish_reason == "tool_calls" and choice.message.content == "Sure.", choice
    [call] = choice.message.tool_calls
    assert call.function.name == "pick" and 0 <= json.loads(call.function.arguments)["n"] <= 9


def test_a_kimi_id_the_conversation_has_already_is_not_given_again():
    """The model writes an id an earlier call of the conversation has (Kimi-K2 counts its calls itself): the
    tool result would name two calls, so the call gets the next free one of its form, whole and streamed."""
    from model_optimizer.runtime.server.chat_output import ChatOutput
    from model_optimizer.runtime.server.tool_parsers_deepseek import KimiK2Parser

    text = (
        "<|tool_calls_section_begin|><|tool_call_begin|>functions.pick:0<|tool_call_argument_begin|>"
        '{"n": 1}<|tool_call_end|><|tool_calls_section_end|>'
    )

    def output() -> ChatOutput:
        parser = KimiK2Parser(PICK)
        parser.history_ids = ("functions.pick:0",)
        return ChatOutput(tools=parser)

    assert [c["id"] for c in output().message(text).tool_calls] == ["functions.pick:1"]
    streamed = output()
    deltas = [streamed.feed(piece) for piece in text] + [streamed.finish()]
    assert [call["id"] for d in deltas for call in d.get("tool_calls", []) if "id" in call] == ["functions.pick:1"]
