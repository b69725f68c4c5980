"""Reasoning through the real server: `--reasoning-parser qwen3`, the prompt's thinking block, and an
output constraint that applies after the reasoning, as in vLLM; and strict tools with tool_choice auto.

The tiny Qwen3 gets `<think>`, `</think>`, `<tool_call>` and `</tool_call>` as added tokens (not special, as Qwen3's own tokenizer has
them) and a template that, like Qwen3's family, opens the block in the prompt (`think_in_prompt`, on
by the server's --default-chat-template-kwargs), closes it (`enable_thinking` false, or
`reasoning_effort` "none"), or leaves it to the model. A random model never ends its thinking by itself,
so `logit_bias` on `</think>` makes it (seeded: the same output every run).
"""

from __future__ import annotations

import json
import re
import shutil

import httpx
import jsonschema
import openai
import pytest
from pydantic import BaseModel, Field

from model_optimizer.runtime.server.config import ServerConfig
from tests.runtime.server.live import start_server
from tests.runtime.server.test_endpoints import sse_events

TEMPLATE = (
    "{% for m in messages %}<|im_start|>{{ m.role }}\n"
    "{% if m.reasoning_content %}<think>{{ m.reasoning_content }}</think>{% endif %}{{ m.content }}<|im_end|>\n"
    "{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n"
    "{% if enable_thinking is defined and enable_thinking is false %}<think>\n\n</think>\n\n"
    "{% elif think_in_prompt %}<think>\n{% endif %}{% endif %}"
)
DIGIT = {
    "type": "object",
    "properties": {"n": {"type": "integer", "minimum": 0, "maximum": 9}},
    "required": ["n"],
    "additionalProperties": False,
}
USER = [{"role": "user", "content": "pick a digit"}]
NOT_IN_PROMPT = {"chat_template_kwargs": {"think_in_prompt": False}}


class Digit(BaseModel):
    n: int = Field(ge=0, le=9)


@pytest.fixture(scope="module")
def thinking_model(tiny_model, tmp_path_factory):
    from transformers import PreTrainedTokenizerFast

    folder = tmp_path_factory.mktemp("thinking") / "qwen3"
    shutil.copytree(tiny_model("qwen3"), folder)
    tokenizer = PreTrainedTokenizerFast.from_pretrained(str(folder))
    tokenizer.add_tokens(["<think>", "</think>", "<tool_call>", "</tool_call>"])  # within the vocabulary (+ 8)
    tokenizer.chat_template = TEMPLATE
    tokenizer.save_pretrained(str(folder))
    return folder, *tokenizer.convert_tokens_to_ids(["<think>", "</think>", "<tool_call>"])


@pytest.fixture(scope="module")
def live(thinking_model):
    from model_optimizer import LLM

    folder, *_ = thinking_model
    llm = LLM(str(folder), max_model_len=512, num_kv_blocks=128, max_num_seqs=8)
    config = ServerConfig(
        served_model_name="tiny",
        reasoning_parser="qwen3",
        default_chat_template_kwargs='{"think_in_prompt": true}',
        enable_auto_tool_choice=True,
        tool_call_parser="hermes",
        enable_prompt_tokens_details=True,
    )
    server = start_server(llm, config)
    yield server
    server.stop()


@pytest.fixture(scope="module")
def client(live):
    return openai.OpenAI(base_url=live.url + "/v1", api_key="unused", max_retries=0)


@pytest.fixture(scope="module")
def ends_thinking(thinking_model):
    """logit_bias that makes `</think>` likely at each step (a random model's logits spread ~1-2)."""
    return {str(thinking_model[2]): 4.0}


def test_a_schema_applies_after_the_reasoning_the_prompt_opened(client, ends_thinking):
    """The block is open in the prompt: the model thinks freely (no JSON forced at its first token), ends
    with `</think>`, and only then must the answer be valid under the schema."""
    completion = client.chat.completions.create(
        model="tiny",
        messages=USER,
        response_format={"type": "json_schema", "json_schema": {"name": "digit", "schema": DIGIT, "strict": True}},
        logit_bias=ends_thinking,
        temperature=1.0,
        seed=3,
        n=4,
        max_tokens=120,
    )
    thoughts = []
    for choice in completion.choices:
        message = choice.message
        assert choice.finish_reason == "stop", choice
        jsonschema.validate(json.loads(message.content), DIGIT)
        reasoning = getattr(message, "reasoning", None)
        assert reasoning == getattr(message, "reasoning_content", None)  # both names, one text
        thoughts.append(reasoning or "")
    assert any(thoughts), "no choice thought before answering: the reasoning was not left free"


@pytest.mark.parametrize("stream", [False, True])
def test_a_choice_or_regex_after_the_reasoning_is_the_content_exactly(live, ends_thinking, stream):
    """The grammar lets the model write a little whitespace between `</think>` and the answer: it is not
    content, so the content is one of the choices, or matches the regex whole."""
    url = live.url + "/v1/chat/completions"
    for constraint, good in (
        ({"choice": ["yes", "no"]}, lambda text: text in ("yes", "no")),
        ({"regex": "[a-c]{3}"}, lambda text: re.fullmatch("[a-c]{3}", text) is not None),
    ):
        body = {"model": "tiny", "messages": USER, "logit_bias": ends_thinking, "temperature": 1.0, "n": 4}
        body |= {"seed": 1, "max_tokens": 80, "structured_outputs": constraint, "stream": stream}
        r = httpx.post(url, json=body, timeout=60)
        if stream:
            contents = ["", "", "", ""]
            for chunk in sse_events(r):
                for choice in chunk["choices"]:
                    contents[choice["index"]] += choice["delta"].get("content") or ""
        else:
            contents = [c["message"]["content"] for c in r.json()["choices"]]
        assert all(good(text) for text in contents), contents


def test_parse_and_streaming_see_the_same_split(client, ends_thinking):
    kwargs = dict(model="tiny", messages=USER, logit_bias=ends_thinking, temperature=1.0, seed=5, max_tokens=120)
    parsed = client.chat.completions.parse(response_format=Digit, **kwargs)
    message = parsed.choices[0].message
    assert isinstance(message.parsed, Digit)
    schema = {"type": "json_schema", "json_schema": {"name": "Digit", "schema": DIGIT, "strict": True}}
    reasoning, named, content = "", "", ""
    for chunk in client.chat.completions.create(stream=True, response_format=schema, **kwargs):
        if chunk.choices:
            delta = chunk.choices[0].delta
            reasoning += getattr(delta, "reasoning", None) or ""
            named += getattr(delta, "reasoning_content", None) or ""
            content += delta.content or ""
    assert reasoning == named
    jsonschema.validate(json.loads(content), DIGIT)


def test_include_reasoning_false_drops_it(client, ends_thinking):
    kwargs = dict(
        model="tiny",
        messages=USER,
        response_format={"type": "json_schema", "json_schema": {"name": "digit", "schema": DIGIT}},
        logit_bias=ends_thinking,
        temperature=1.0,
        seed=3,
        max_tokens=120,
        extra_body={"include_reasoning": False},
    )
    message = client.chat.completions.create(**kwargs).choices[0].message
    assert getattr(message, "reasoning", None) is None and getattr(message, "reasoning_content", None) is None
    jsonschema.validate(json.loads(message.content), DIGIT)
    for chunk in client.chat.completions.create(stream=True, **kwargs):
        for choice in chunk.choices:
            assert getattr(choice.delta, "reasoning", None) is None
            assert getattr(choice.delta, "reasoning_content", None) is None


@pytest.mark.parametrize("extra", [{"chat_template_kwargs": {"enable_thinking": False}}, {"reasoning_effort": "none"}])
def test_a_prompt_that_closed_the_block_is_constrained_from_the_first_token(client, extra):
    """Thinking turned off (the template closes the block in the prompt): everything is the answer, and no
    bias is needed to reach it; reasoning_effort "none" turns it off as vLLM maps it."""
    completion = client.chat.completions.create(
        model="tiny",
        messages=USER,
        response_format={"type": "json_schema", "json_schema": {"name": "digit", "schema": DIGIT}},
        temperature=0,
        max_tokens=40,
        extra_body=extra,
    )
    message = completion.choices[0].message
    assert completion.choices[0].finish_reason == "stop"
    assert getattr(message, "reasoning", None) is None
    jsonschema.validate(json.loads(message.content), DIGIT)


def test_the_model_may_open_a_block_when_the_prompt_did_not(client, thinking_model):
    """No block in the prompt (qwen3's own rule: reasoning only when the output opens with <think>): the
    model may think first or answer at once. Here it is made to open one, and close it at once."""
    _, start_id, end_id, _ = thinking_model
    completion = client.chat.completions.create(
        model="tiny",
        messages=USER,
        response_format={"type": "json_schema", "json_schema": {"name": "digit", "schema": DIGIT}},
        logit_bias={str(start_id): 50, str(end_id): 100},
        temperature=0,
        max_tokens=40,
        extra_body={**NOT_IN_PROMPT, "return_token_ids": True},
    )
    choice = completion.choices[0]
    assert choice.token_ids[:2] == [start_id, end_id]
    assert getattr(choice.message, "reasoning", None) is None  # an empty block
    assert completion.usage.completion_tokens_details.reasoning_tokens == 0
    jsonschema.validate(json.loads(choice.message.content), DIGIT)


def test_a_required_tool_call_follows_the_reasoning(client, ends_thinking):
    tools = [openai.pydantic_function_tool(Digit, name="pick")]
    completion = client.chat.completions.create(
        model="tiny",
        messages=USER,
        tools=tools,
        tool_choice="required",
        logit_bias=ends_thinking,
        temperature=1.0,
        seed=3,
        max_tokens=160,
    )
    choice = completion.choices[0]
    assert choice.finish_reason == "tool_calls"
    for call in choice.message.tool_calls:
        assert call.function.name == "pick"
        jsonschema.validate(json.loads(call.function.arguments), DIGIT)


def test_reasoning_sent_back_under_either_name_reaches_the_template(live):
    """An assistant turn's reasoning, as vLLM (`reasoning`) or DeepSeek (`reasoning_content`) clients send it."""
    import httpx

    for name in ("reasoning", "reasoning_content"):
        messages = [*USER, {"role": "assistant", "content": "7", name: "sevens are lucky"}, *USER]
        tokens = httpx.post(live.url + "/tokenize", json={"model": "tiny", "messages": messages}).json()["tokens"]
        text = httpx.post(live.url + "/detokenize", json={"model": "tiny", "tokens": tokens}).json()["prompt"]
        assert "<think>sevens are lucky</think>7" in text


def test_a_strict_tool_holds_the_models_own_calls_to_its_schema(client, thinking_model):
    """tool_choice auto with a strict tool (hermes): free text, but once the model writes its <tool_call>
    token the call is forced into Qwen's format with arguments valid under the tool's schema. Made to
    write that token at once (logit_bias), the random model's first call parses and validates."""
    tool_call = thinking_model[3]
    tools = [{"type": "function", "function": {"name": "pick", "parameters": DIGIT, "strict": True}}]
    completion = client.chat.completions.create(
        model="tiny",
        messages=USER,
        tools=tools,
        logit_bias={str(tool_call): 100},
        temperature=0,
        max_tokens=60,
        parallel_tool_calls=False,
        extra_body={"chat_template_kwargs": {"enable_thinking": False}},
    )
    [call] = completion.choices[0].message.tool_calls
    assert call.function.name == "pick"
    jsonschema.validate(json.loads(call.function.arguments), DIGIT)


def test_a_thinking_budget_ends_the_block_and_the_answer_follows(client, thinking_model):
    """vLLM's thinking_token_budget: after that many tokens of thinking the end tag is forced, so the random
    model (which never ends by itself) thinks exactly 3 tokens and then answers under the schema."""
    end_id = thinking_model[2]
    completion = client.chat.completions.create(
        model="tiny",
        messages=USER,
        response_format={"type": "json_schema", "json_schema": {"name": "digit", "schema": DIGIT}},
        temperature=0,
        max_tokens=60,
        extra_body={"thinking_token_budget": 3, "return_token_ids": True},
    )
    choice = completion.choices[0]
    assert choice.token_ids[3] == end_id and end_id not in choice.token_ids[:3]
    assert choice.finish_reason == "stop" and getattr(choice.message, "reasoning", None)
    jsonschema.validate(json.loads(choice.message.content), DIGIT)
    assert completion.usage.completion_tokens_details.reasoning_tokens == 3  # the tag itself not counted


def test_usage_counts_reasoning_tokens_streamed_and_not(client):
    """usage.completion_tokens_details.reasoning_tokens: the thinking of every choice, summed, the same in a
    stream's usage chunk as in the whole response."""
    kwargs = dict(
        model="tiny",
        messages=USER,
        temperature=1.0,
        seed=7,
        n=2,
        max_tokens=30,
        extra_body={"thinking_token_budget": 4},
    )
    whole = client.chat.completions.create(**kwargs).usage
    assert whole.completion_tokens_details.reasoning_tokens == 8
    chunks = list(client.chat.completions.create(stream=True, stream_options={"include_usage": True}, **kwargs))
    assert chunks[-1].usage.completion_tokens_details.reasoning_tokens == 8
    assert chunks[-1].usage.completion_tokens == whole.completion_tokens
    closed = client.chat.completions.create(
        model="tiny", messages=USER, max_tokens=5, extra_body={"chat_template_kwargs": {"enable_thinking": False}}
    )
    assert closed.usage.completion_tokens_details.reasoning_tokens == 0


def test_usage_counts_prompt_tokens_the_prefix_cache_served(client):
    """--enable-prompt-tokens-details: the second request with a long shared prompt finds it cached."""
    messages = [{"role": "user", "content": "tell me about the sea " * 30}]
    kwargs = dict(model="tiny", messages=messages, max_tokens=2, extra_body={"reasoning_effort": "none"})
    first = client.chat.completions.create(**kwargs).usage
    second = client.chat.completions.create(**kwargs).usage
    assert first.prompt_tokens_details.cached_tokens < second.prompt_tokens_details.cached_tokens
    assert 0 < second.prompt_tokens_details.cached_tokens < second.prompt_tokens
    echo = client.completions.create(model="tiny", prompt="hi", max_tokens=0, extra_body={"echo": True}).usage
    assert echo.prompt_tokens_details is not None  # the prompt-only answer keeps the details


def test_a_question_about_the_tag_opens_no_block(client, thinking_model):
    """Only the prompt's tail counts: a user asking about `<think>` does not put the output in a block.
    With the model kept from opening one itself, the answer is the constrained JSON at once."""
    start_id = thinking_model[1]
    completion = client.chat.completions.create(
        model="tiny",
        messages=[{"role": "user", "content": "What does the <think> tag do?"}],
        response_format={"type": "json_schema", "json_schema": {"name": "digit", "schema": DIGIT}},
        logit_bias={str(start_id): -100},
        temperature=0,
        max_tokens=40,
        extra_body=NOT_IN_PROMPT,
    )
    choice = completion.choices[0]
    assert choice.finish_reason == "stop" and getattr(choice.message, "reasoning", None) is None
    jsonschema.validate(json.loads(choice.message.content), DIGIT)


@pytest.mark.parametrize(
    ("constraint", "pattern"),
    [({"regex": "ab <tool_call>[0-9]"}, r"ab <tool_call>[0-9]"), ({"choice": ["<tool_call>7", "no"]}, "<tool_call>7")],
)
def test_a_regex_or_choice_that_spells_a_tag_token_is_written_with_it(live, thinking_model, constraint, pattern):
    """`<tool_call>` is one added token (text never holds it, for llguidance): a regex or choice that
    spells it is answered with the token, as the tokenizer writes that text, not a 500 "left its grammar"."""
    call_id = thinking_model[3]
    body = {"model": "tiny", "messages": USER, "max_tokens": 20, "temperature": 0, "structured_outputs": constraint}
    body |= {"chat_template_kwargs": {"enable_thinking": False}, "return_token_ids": True}
    response = httpx.post(live.url + "/v1/chat/completions", json=body | {"logit_bias": {str(call_id): 50}}, timeout=60)
    assert response.status_code == 200, response.text
    choice = response.json()["choices"][0]
    assert choice["finish_reason"] == "stop" and re.fullmatch(pattern, choice["message"]["content"])
    assert call_id in choice["token_ids"]


def test_responses_carry_the_reasoning_as_an_item_whole_and_streamed(client, ends_thinking):
    """/v1/responses: the thinking is a reasoning item before the message, the same text chat splits off;
    streamed, its reasoning_text deltas come before the answer's output_text deltas."""
    extra = {"logit_bias": ends_thinking, "seed": 5}
    chat = client.chat.completions.parse(model="tiny", messages=USER, response_format=Digit, temperature=1.0,
                                         max_tokens=120, **extra)  # fmt: skip
    kwargs = dict(model="tiny", input=USER[0]["content"], temperature=1.0, max_output_tokens=120, extra_body=extra)
    response = client.responses.parse(text_format=Digit, **kwargs)
    assert [item.type for item in response.output] == ["reasoning", "message"]
    [part] = response.output[0].content
    assert part.text == chat.choices[0].message.reasoning_content
    assert response.output_parsed == chat.choices[0].message.parsed
    assert response.usage.output_tokens_details.reasoning_tokens > 0
    schema = {"type": "json_schema", "name": "Digit", "schema": DIGIT, "strict": True}
    events = list(client.responses.create(stream=True, text={"format": schema}, **kwargs))
    kinds = [e.type for e in events]
    thinking = "".join(e.delta for e in events if e.type == "response.reasoning_text.delta")
    answer = "".join(e.delta for e in events if e.type == "response.output_text.delta")
    assert thinking == part.text and json.loads(answer) == response.output_parsed.model_dump()
    assert kinds.index("response.reasoning_text.done") < kinds.index("response.output_text.delta")
    assert [item.type for item in events[-1].response.output] == ["reasoning", "message"]


def test_responses_send_reasoning_items_back_as_chat_does(client, live):
    """A reasoning item sent back (the agent loop) is the next assistant turn's reasoning, as chat takes
    `reasoning` on a message: the same prompt tokens; and with the reasoning split off, output_text carries
    no logprobs (chat's cover the thinking too)."""
    thought = {"type": "reasoning", "id": "rs_1", "summary": [], "content": [{"type": "reasoning_text", "text": "hmm"}]}
    items = [*USER, thought, {"role": "assistant", "content": "3"}, {"role": "user", "content": "again"}]
    response = client.responses.create(model="tiny", input=items, max_output_tokens=1, top_logprobs=1,
                                       include=["message.output_text.logprobs"])  # fmt: skip
    chat_messages = [
        *USER,
        {"role": "assistant", "content": "3", "reasoning": "hmm"},
        {"role": "user", "content": "again"},
    ]
    chat = httpx.post(live.url + "/v1/chat/completions", json={"model": "tiny", "messages": chat_messages,
                                                               "max_tokens": 1}, timeout=60).json()  # fmt: skip
    dropped = httpx.post(live.url + "/v1/chat/completions", json={"model": "tiny", "messages": [
        *USER, {"role": "assistant", "content": "3"}, {"role": "user", "content": "again"}], "max_tokens": 1},
        timeout=60).json()  # fmt: skip
    assert response.usage.input_tokens == chat["usage"]["prompt_tokens"] != dropped["usage"]["prompt_tokens"]
    message = [item for item in response.output if item.type == "message"]
    assert all(part.logprobs == [] for m in message for part in m.content)


def test_a_response_cut_while_thinking_is_its_reasoning_alone(client):
    """max_output_tokens reached inside the thinking: the output is the reasoning item alone, incomplete,
    whole and streamed alike (no empty message after it)."""
    kwargs = dict(model="tiny", input=USER[0]["content"], max_output_tokens=4, temperature=0)
    whole = client.responses.create(**kwargs)
    assert whole.status == "incomplete" and [(i.type, i.status) for i in whole.output] == [("reasoning", "incomplete")]
    final = list(client.responses.create(stream=True, **kwargs))[-1]
    assert final.type == "response.incomplete"
    assert [(i.type, i.status) for i in final.response.output] == [("reasoning", "incomplete")]
    assert final.response.output[0].content[0].text == whole.output[0].content[0].text
