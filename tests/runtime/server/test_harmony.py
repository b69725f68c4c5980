"""gpt-oss's harmony format: `--reasoning-parser openai_gptoss` and `--tool-call-parser openai` on texts as
gpt-oss writes them: read whole, by character and in chunks they give the same reasoning, content and
calls; views only grow; broken and cut-off texts never raise."""

from __future__ import annotations

import dataclasses
import functools
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
def harmony_folder(tiny_model, tmp_path_factory):
    """The tiny Qwen3 with harmony's markers as special tokens (gpt-oss's tokenizer has them so)."""
    import shutil

    from transformers import PreTrainedTokenizerFast

    folder = tmp_path_factory.mktemp("harmony") / "qwen3"
    shutil.copytree(tiny_model("qwen3"), folder)
    tokenizer = PreTrainedTokenizerFast.from_pretrained(str(folder))
    tokenizer.add_special_tokens({"additional_special_tokens": MARKERS})  # within the vocabulary (+ 8)
    tokenizer.chat_template = HARMONY_TEMPLATE
    tokenizer.save_pretrained(str(folder))
    return folder


@pytest.fixture(scope="module")
def harmony_client(harmony_folder):
    """harmony_folder behind a live server with both harmony parsers."""
    import openai

    from model_optimizer import LLM
    from model_optimizer.runtime.server.config import ServerConfig
    from tests.runtime.server.live import start_server

    llm = LLM(str(harmony_folder), max_model_len=256, num_kv_blocks=64, max_num_seqs=4)
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


WEATHER = {
    "type": "object",
    "properties": {"city": {"enum": ["Oslo", "Rome"]}, "days": {"type": "integer", "minimum": 1, "maximum": 3}},
    "required": ["city", "days"],
    "additionalProperties": False,
}
FORCED_TOOLS = [
    {"type": "function", "function": {"name": "get_weather", "parameters": WEATHER}},
    {"type": "function", "function": {"name": "pick", "parameters": DIGIT}},
]


def test_a_forced_call_is_constrained_to_gpt_oss_own_call_and_nothing_else(harmony_folder):
    """tool_choice required under `--tool-call-parser openai` constrains the turn to gpt-oss's own shape: after
    `<|start|>assistant` an analysis message or none, or the rest of the message the prompt opened, ended; then
    `<|channel|>commentary to=functions.NAME <|constrain|>json<|message|>` and arguments under that tool's
    schema. Walked through the grammar with the tokenizer whose markers are tokens; the JSON list of calls
    other formats get is refused."""
    from transformers import PreTrainedTokenizerFast

    from model_optimizer.runtime.server.errors import APIError
    from model_optimizer.runtime.server.tools import ToolPlan
    from model_optimizer.runtime.structured.grammar import ll_tokenizer, matcher

    tokenizer = PreTrainedTokenizerFast.from_pretrained(str(harmony_folder))
    ll = ll_tokenizer(tokenizer, len(tokenizer), [tokenizer.eos_token_id])
    plan = ToolPlan(turn_tools=[(t["function"]["name"], t["function"]["parameters"]) for t in FORCED_TOOLS])

    def accepts(prompt: str, text: str) -> bool:
        encode = functools.partial(tokenizer.encode, add_special_tokens=False)
        walk = matcher(plan.for_prompt(prompt, encode).constraint, ll)[1]
        ids = tokenizer.encode(text, add_special_tokens=False)
        return walk.try_consume_tokens(ids) == len(ids) and walk.is_accepting()

    turn, opened = (
        "<|start|>user<|message|>hi<|end|><|start|>assistant",
        "<|start|>assistant<|channel|>analysis<|message|>",
    )
    header = "<|channel|>commentary to=functions.get_weather <|constrain|>json<|message|>"
    thought = "<|channel|>analysis<|message|>Weather, so call it.<|end|><|start|>assistant"
    assert accepts(turn, header + '{"city":"Oslo","days":2}')  # at once
    assert accepts(turn, thought + header + '{"city":"Rome","days":1}')
    assert accepts(turn, '<|channel|>commentary to=functions.pick <|constrain|>json<|message|>{"n":7}')
    assert accepts(opened, "the rest of it<|end|><|start|>assistant" + header + '{"city":"Oslo","days":3}')
    assert not accepts(opened, header + '{"city":"Oslo","days":3}')  # the open analysis is ended first
    assert not accepts(turn, "no header<|end|><|start|>assistant" + header + '{"city":"Oslo","days":3}')
    assert not accepts(turn, header + '{"city":"Paris","days":2}')  # outside the tool's schema
    assert not accepts(turn, header + '{"n":7}')  # the other tool's arguments
    assert not accepts(turn, '<|channel|>final<|message|>[{"name":"pick","parameters":{"n":7}}]')
    assert not accepts(turn, "<|channel|>analysis<|message|>no call<|end|>")
    assert not accepts(turn, "<|channel|>commentary to=functions.nope <|constrain|>json<|message|>{}")
    huge = {"type": "object", "properties": {"x": {"type": "integer", "minimum": 10**20}}}
    with pytest.raises(APIError) as refused:  # an integer the grammar engine would clamp: a 400, as for json
        ToolPlan(turn_tools=[("big", huge)]).for_prompt(turn, tokenizer.encode)
    assert refused.value.status_code == 400 and refused.value.param == "tools"


@pytest.mark.parametrize("fresh", [False, True], ids=["analysis-opened", "turn-opened"])
def test_required_and_named_calls_come_back_as_calls_in_gpt_oss_format(harmony_client, fresh):
    """Through the live server with the `openai` client: a thinking budget ends the analysis with
    `<|end|><|start|>assistant` (not the final header, which the call's grammar refuses), the grammar writes the
    call's header, and the call comes back typed, whole and streamed alike: finish_reason "tool_calls" for
    required, "stop" for a named function, as OpenAI reports a forced one."""
    import jsonschema

    base = dict(
        model="tiny",
        messages=[{"role": "user", "content": "weather or a digit?"}],
        tools=FORCED_TOOLS,
        temperature=0,
        max_tokens=60,
        extra_body={"chat_template_kwargs": {"fresh": fresh}, "thinking_token_budget": 3},
    )
    named = {"type": "function", "function": {"name": "pick"}}
    for choice_arg, finish in (("required", "tool_calls"), (named, "stop")):
        choice = harmony_client.chat.completions.create(**base, tool_choice=choice_arg).choices[0]
        assert choice.finish_reason == finish and choice.message.content is None
        (call,) = choice.message.tool_calls
        schema = {"get_weather": WEATHER, "pick": DIGIT}[call.function.name]
        jsonschema.validate(json.loads(call.function.arguments), schema)
        if choice_arg == named:
            assert call.function.name == "pick"
        reasoning = getattr(choice.message, "reasoning_content", None)
        assert reasoning is None or "<|" not in reasoning
        streamed = {}
        for chunk in harmony_client.chat.completions.create(**base, tool_choice=choice_arg, stream=True):
            for delta in (chunk.choices[0].delta.tool_calls or []) if chunk.choices else []:
                entry = streamed.setdefault(delta.index, {"name": "", "arguments": ""})
                entry["name"] += (delta.function.name or "") if delta.function else ""
                entry["arguments"] += (delta.function.arguments or "") if delta.function else ""
        assert streamed == {0: {"name": call.function.name, "arguments": call.function.arguments}}


def test_reasoning_tags_with_tokens_are_spelled_as_the_tokenizer_writes_them(harmony_folder):
    """Under an output constraint after gpt-oss's reasoning, the analysis header and the answer header are the
    tokenizer's own tokens, text included: `analysis` spelled in pieces (as the random model did, so that a
    thinking budget never saw the block open) is refused."""
    from transformers import PreTrainedTokenizerFast

    from model_optimizer.runtime.structured.grammar import ll_tokenizer, matcher
    from model_optimizer.runtime.structured.params import StructuredOutputs

    tokenizer = PreTrainedTokenizerFast.from_pretrained(str(harmony_folder))
    ll = ll_tokenizer(tokenizer, len(tokenizer), [tokenizer.eos_token_id])
    start, end = GptOssReasoningParser.START, GptOssReasoningParser.END
    so = dataclasses.replace(StructuredOutputs.json(DIGIT), reasoning_start=start, reasoning_end=end)
    template = matcher(so, ll)[1]

    def accepts(ids: list[int]) -> bool:
        walk = template.deep_copy()
        return walk.try_consume_tokens(ids) == len(ids) and walk.is_accepting()

    def encode(text: str) -> list[int]:
        return tokenizer.encode(text, add_special_tokens=False)

    answer = encode('{"n":4}')
    assert accepts(encode(start + "think" + end) + answer) and accepts(answer)
    channel, message = tokenizer.convert_tokens_to_ids(["<|channel|>", "<|message|>"])
    pieces = [channel, *tokenizer.convert_tokens_to_ids(["a", "n", "al", "ys", "is"]), message]
    assert tokenizer.decode(pieces) == start and pieces != encode(start)
    assert not accepts(pieces + encode("think" + end) + answer)
