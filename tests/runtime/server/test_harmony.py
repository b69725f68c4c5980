"""gpt-oss's harmony format: `--reasoning-parser openai_gptoss` and `--tool-call-parser openai` on texts as
gpt-oss writes them: read whole, by character and in chunks they give the same reasoning, content and
calls; views only grow; broken and cut-off texts never raise."""

from __future__ import annotations

import json
import random

import pytest

from model_optimizer.runtime.server.chat_output import ChatOutput
from model_optimizer.runtime.server.harmony import HarmonyToolParser, read_messages
from model_optimizer.runtime.server.reasoning import REASONING_PARSERS, GptOssReasoningParser
from model_optimizer.runtime.server.tool_parser_registry import PARSERS
from tests.runtime.server.test_tool_parsers import _streamed
from tests.runtime.server.test_tool_parsers_more import TOOLS, assert_broken_texts_agree, assert_same_calls_however_fed

THINK = "<|channel|>analysis<|message|>The user wants the weather; call the tool.<|end|>"
ANSWER = "<|start|>assistant<|channel|>final<|message|>It is sunny in Oslo."
CALL = '<|start|>assistant<|channel|>commentary to=functions.get_weather <|constrain|>json<|message|>{"city": "Oslo"}<|call|>'
PREAMBLE = "<|start|>assistant<|channel|>commentary<|message|>Checking the clock.<|end|>"
ROLE_CALL = "<|start|>assistant to=functions.time<|channel|>commentary json<|message|>{}<|call|>"
REASONING = "The user wants the weather; call the tool."

CASES = [  # (text, reasoning, content, calls) with both parsers
    (THINK + ANSWER, REASONING, "It is sunny in Oslo.", []),
    (THINK + CALL, REASONING, None, [("get_weather", {"city": "Oslo"})]),
    (THINK + PREAMBLE + ROLE_CALL, REASONING, "Checking the clock.", [("time", {})]),  # the recipient after the role
    (THINK + THINK + ANSWER, REASONING + "\n" + REASONING, "It is sunny in Oslo.", []),
    (THINK + "<|start|>assistant<|channel|>final<|message|>cut sh", REASONING, "cut sh", []),
    ("<|channel|>analysis<|message|>cut while thinking", "cut while thinking", None, []),
    ("Plain text, not harmony <|", None, "Plain text, not harmony <|", []),
    ("<|channel|>analysis<|message|>a <|start|>assistant<|channel|>fin", "a ", None, []),  # cut in a header
    ("<|channel|>analysis<|message|>plan<|channel|>final<|message|>ok", "plan", "ok", []),  # a header, no end
]


def _calls(message) -> list[tuple[str, dict]]:
    return [(c["function"]["name"], json.loads(c["function"]["arguments"])) for c in message.tool_calls]


def _output() -> ChatOutput:
    return ChatOutput(reasoning=GptOssReasoningParser(), tools=HarmonyToolParser(TOOLS))


@pytest.mark.parametrize(("text", "reasoning", "content", "calls"), CASES)
def test_reasoning_content_and_calls_whole_and_streamed(text, reasoning, content, calls):
    whole = _output().message(text)
    assert (whole.reasoning_content, whole.content, _calls(whole)) == (reasoning, content, calls)
    for pieces in ([text], list(text), [text[i : i + 5] for i in range(0, len(text), 5)]):
        got_content, got_reasoning, got_calls = _streamed(_output(), pieces)
        assert (got_reasoning, got_content) == (reasoning or "", content or "")
        assert [(c["name"], json.loads(c["arguments"])) for c in got_calls] == calls


def test_the_tool_parser_alone_takes_every_other_body_for_content():
    assert_same_calls_however_fed(
        HarmonyToolParser, PREAMBLE + CALL, "Checking the clock.", [("get_weather", {"city": "Oslo"})]
    )
    assert_same_calls_however_fed(HarmonyToolParser, THINK + ANSWER, REASONING + "It is sunny in Oslo.", [])
    assert_same_calls_however_fed(HarmonyToolParser, "no calls here", "no calls here", [])


def test_a_built_in_tools_message_is_no_call():
    """A recipient outside `functions.` (the model's own browser or python tools) is not the request's tool."""
    text = "<|channel|>analysis to=browser.search <|constrain|>json<|message|>{}<|call|>"
    assert _output().message(text).tool_calls == []


def test_broken_and_cut_off_texts_never_raise_and_views_still_grow():
    assert_broken_texts_agree(HarmonyToolParser, [THINK + PREAMBLE + CALL, THINK + ANSWER, ROLE_CALL], random.Random(5))
    rng = random.Random(6)
    for text in (THINK + CALL, THINK + THINK + ANSWER, PREAMBLE + ROLE_CALL):
        for _ in range(30):
            a, b = sorted(rng.sample(range(len(text) + 1), 2))
            broken = text[:a] + text[b:]
            whole = _output().message(broken)
            content, reasoning, _ = _streamed(_output(), [broken[i : i + 3] for i in range(0, len(broken), 3)])
            assert (reasoning, content) == (whole.reasoning_content or "", whole.content or "")


def test_a_prompt_ending_inside_a_message_makes_the_output_its_body():
    final = GptOssReasoningParser.for_prompt("<|start|>assistant<|channel|>final<|message|>")
    assert final.split("Hi there", True) == ("", "Hi there") and final.constraint_tags() == ("", "")
    thinking = GptOssReasoningParser.for_prompt("<|start|>assistant<|channel|>analysis<|message|>")
    assert thinking.split("hmm<|end|><|start|>assistant<|channel|>final<|message|>ok", True) == ("hmm", "ok")
    assert thinking.constraint_tags() == ("", "<|end|><|start|>assistant<|channel|>final<|message|>")
    fresh = GptOssReasoningParser.for_prompt("<|start|>user<|message|>q<|end|><|start|>assistant")
    assert fresh.constraint_tags() == (
        "<|channel|>analysis<|message|>",
        "<|end|><|start|>assistant<|channel|>final<|message|>",
    )


def test_messages_carry_channel_recipient_and_completeness():
    [think, call] = read_messages(THINK + CALL[:-8], final=False)
    assert (think.channel, think.recipient, think.complete) == ("analysis", None, True)
    assert (call.channel, call.recipient, call.body, call.complete) == (
        "commentary",
        "functions.get_weather",
        '{"city": "Oslo"}',
        False,
    )
    assert read_messages(THINK + "<|start|>assistant<|channel|>fin", final=False)[1:] == []  # header arriving


def test_reasoning_tokens_are_the_reasoning_encoded():
    parser = GptOssReasoningParser()
    assert parser.count_tokens(THINK + ANSWER, [], lambda text: text.split()) == len(REASONING.split())
    assert parser.count_tokens(ANSWER, [], lambda text: text.split()) == 0


def test_the_flags_name_them_as_vllm_does():
    assert REASONING_PARSERS["openai_gptoss"] is GptOssReasoningParser and PARSERS["openai"] is HarmonyToolParser
    assert HarmonyToolParser().call_frame("lookup") is None  # strict tools stay unconstrained


# ---------------------------------------------------------------------------------- through the server
MARKERS = ["<|start|>", "<|channel|>", "<|message|>", "<|end|>", "<|call|>", "<|return|>", "<|constrain|>"]
HARMONY_TEMPLATE = (
    "{% for m in messages %}<|start|>{{ m.role }}<|message|>{{ m.content }}<|end|>{% endfor %}"
    "{% if add_generation_prompt %}<|start|>assistant{% if not fresh %}<|channel|>analysis<|message|>{% endif %}"
    "{% endif %}"
)
"""gpt-oss's turn shape, opening the analysis message in the prompt (a prefill), so the random model's first
tokens are reasoning; with `fresh`, as gpt-oss's own template ends, at `<|start|>assistant`."""
DIGIT = {
    "type": "object",
    "properties": {"n": {"type": "integer", "minimum": 0, "maximum": 9}},
    "required": ["n"],
    "additionalProperties": False,
}


@pytest.fixture(scope="module")
def harmony_client(tiny_model, tmp_path_factory):
    """The tiny Qwen3 with harmony's markers as special tokens (gpt-oss's tokenizer has them so) behind a live
    server with both harmony parsers."""
    import shutil

    import openai
    from transformers import PreTrainedTokenizerFast

    from model_optimizer import LLM
    from model_optimizer.runtime.server.config import ServerConfig
    from tests.runtime.server.live import start_server

    folder = tmp_path_factory.mktemp("harmony") / "qwen3"
    shutil.copytree(tiny_model("qwen3"), folder)
    tokenizer = PreTrainedTokenizerFast.from_pretrained(str(folder))
    tokenizer.add_special_tokens({"additional_special_tokens": MARKERS})  # within the vocabulary (+ 8)
    tokenizer.chat_template = HARMONY_TEMPLATE
    tokenizer.save_pretrained(str(folder))
    llm = LLM(str(folder), max_model_len=256, num_kv_blocks=64, max_num_seqs=4)
    config = ServerConfig(
        served_model_name="tiny",
        reasoning_parser="openai_gptoss",
        tool_call_parser="openai",
        enable_auto_tool_choice=True,
    )
    server = start_server(llm, config)
    yield openai.OpenAI(base_url=server.url + "/v1", api_key="unused", max_retries=0)
    server.stop()


def test_a_thinking_budget_forces_the_final_header_and_the_answer_follows_the_schema(harmony_client):
    """The markers are special tokens, kept in the text for the parsers; after 3 tokens of analysis the budget
    forces `<|end|><|start|>assistant<|channel|>final<|message|>` (special tokens and text: the grammar of the
    constraint after it spells them as tokens) and the answer is constrained; streamed, the same split."""
    import jsonschema

    kwargs = dict(
        model="tiny",
        messages=[{"role": "user", "content": "pick a digit"}],
        response_format={"type": "json_schema", "json_schema": {"name": "digit", "schema": DIGIT}},
        temperature=0,
        max_tokens=40,
        extra_body={"thinking_token_budget": 3},
    )
    choice = harmony_client.chat.completions.create(**kwargs).choices[0]
    reasoning = getattr(choice.message, "reasoning_content", None)
    assert reasoning and "<|" not in reasoning and choice.finish_reason == "stop"
    jsonschema.validate(json.loads(choice.message.content), DIGIT)
    assert choice.message.content == choice.message.content.strip()  # the grammar's whitespace is no answer
    content, thought = "", ""
    for chunk in harmony_client.chat.completions.create(**kwargs, stream=True):
        if chunk.choices:
            content += chunk.choices[0].delta.content or ""
            thought += getattr(chunk.choices[0].delta, "reasoning_content", None) or ""
    assert (thought, content) == (reasoning, choice.message.content)


def test_a_turn_the_prompt_left_open_opens_its_analysis_with_the_header(harmony_client):
    """The prompt ends at `<|start|>assistant`, as gpt-oss's own template does: the grammar lets the model open
    the analysis with its header (special tokens, spelled as tokens) or answer at once; this model opens it, the
    budget counts from after the header and forces the answer header, and the answer follows the schema."""
    import jsonschema

    choice = harmony_client.chat.completions.create(
        model="tiny",
        messages=[{"role": "user", "content": "pick a digit"}],
        response_format={"type": "json_schema", "json_schema": {"name": "digit", "schema": DIGIT}},
        temperature=0,
        max_tokens=40,
        extra_body={"chat_template_kwargs": {"fresh": True}, "thinking_token_budget": 3},
    ).choices[0]
    reasoning = getattr(choice.message, "reasoning_content", None)
    assert choice.finish_reason == "stop" and reasoning and "<|" not in reasoning
    jsonschema.validate(json.loads(choice.message.content), DIGIT)
