"""LLM.chat, vLLM's offline chat: the prompt is what transformers' apply_chat_template renders and
tokenizes, and the reply is what generate gives for those token ids."""

from __future__ import annotations

import pytest
from transformers import AutoTokenizer

from model_optimizer import LLM, SamplingParams

GREEDY = SamplingParams(max_tokens=6, temperature=0.0, ignore_eos=True)
CONVERSATION = [
    {"role": "system", "content": "You answer briefly."},
    {"role": "user", "content": "What is a json module?"},
]
TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "description": "The weather in a city",
            "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
        },
    }
]
TOOLS_TEMPLATE = (
    "{% if tools %}{% for tool in tools %}<|im_start|>tool {{ tool.function.name }}: {{ tool.function | tojson }}"
    "<|im_end|>\n{% endfor %}{% endif %}"
    "{% for message in messages %}<|im_start|>{{ message['role'] }}\n{{ message['content'] }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n"
    "{% if enable_thinking is defined and not enable_thinking %}<think>\n\n</think>\n\n{% endif %}{% endif %}"
)


@pytest.fixture(scope="module")
def hf_tokenizer(tiny_model):
    return AutoTokenizer.from_pretrained(str(tiny_model("qwen3")))


def _hf_ids(hf_tokenizer, messages, **kwargs) -> list[int]:
    rendered = hf_tokenizer.apply_chat_template(messages, tokenize=True, return_dict=True, **kwargs)
    return list(rendered["input_ids"])


def test_one_conversation_is_transformers_prompt_and_generate_reply(qwen3_llm, hf_tokenizer):
    [out] = qwen3_llm.chat(CONVERSATION, GREEDY)
    ids = _hf_ids(hf_tokenizer, CONVERSATION, add_generation_prompt=True)
    assert out.prompt_token_ids == ids
    assert out.prompt == hf_tokenizer.apply_chat_template(CONVERSATION, tokenize=False, add_generation_prompt=True)
    assert out.outputs[0].token_ids == qwen3_llm.generate([ids], GREEDY)[0].outputs[0].token_ids


def test_a_list_of_conversations_comes_back_in_order(qwen3_llm, hf_tokenizer):
    second = [{"role": "user", "content": "naïve café 😀"}]
    outs = qwen3_llm.chat([CONVERSATION, second], [GREEDY, GREEDY.clone(max_tokens=3)])
    assert [o.prompt_token_ids for o in outs] == [
        _hf_ids(hf_tokenizer, CONVERSATION, add_generation_prompt=True),
        _hf_ids(hf_tokenizer, second, add_generation_prompt=True),
    ]
    assert [len(o.outputs[0].token_ids) for o in outs] == [6, 3]
    seen = []
    qwen3_llm.chat([second, CONVERSATION], GREEDY, on_progress=lambda index, _: seen.append(index))
    assert sorted(seen) == [0, 1]


def test_tools_template_and_its_kwargs_reach_the_template(qwen3_llm, hf_tokenizer):
    [out] = qwen3_llm.chat(
        CONVERSATION, GREEDY, chat_template=TOOLS_TEMPLATE, tools=TOOLS, chat_template_kwargs={"enable_thinking": False}
    )
    expected = hf_tokenizer.apply_chat_template(
        CONVERSATION,
        tools=TOOLS,
        chat_template=TOOLS_TEMPLATE,
        tokenize=False,
        add_generation_prompt=True,
        enable_thinking=False,
    )
    assert out.prompt == expected
    assert "get_weather" in out.prompt and out.prompt.endswith("<think>\n\n</think>\n\n")


@pytest.mark.parametrize("content", ["It is", "im", "end", ">", "\n", "  padded  "])
def test_continue_final_message_goes_on_from_the_last_message(qwen3_llm, hf_tokenizer, content):
    """Texts that also occur in the template's own markup (`im` in <|im_end|>) end where the message does."""
    partial = [*CONVERSATION, {"role": "assistant", "content": content}]
    [out] = qwen3_llm.chat(partial, GREEDY, add_generation_prompt=False, continue_final_message=True)
    assert out.prompt == hf_tokenizer.apply_chat_template(partial, tokenize=False, continue_final_message=True)
    assert out.prompt_token_ids == _hf_ids(hf_tokenizer, partial, continue_final_message=True)
    assert out.prompt.endswith("assistant\n" + content)


def test_continue_final_message_with_content_parts(qwen3_llm):
    parts = [{"type": "text", "text": "It"}, {"type": "text", "text": "is"}]
    template = "{% for m in messages %}[{{ m.role }}]{% for p in m.content %}{{ p.text }}|{% endfor %}{% endfor %}"
    [out] = qwen3_llm.chat(
        [{"role": "assistant", "content": parts}],
        GREEDY,
        chat_template=template,
        add_generation_prompt=False,
        continue_final_message=True,
    )
    assert out.prompt == "[assistant]It|is"


@pytest.mark.parametrize(
    ("messages", "match"),
    [
        ([], "non-empty list"),
        ("hello", "non-empty list"),
        ([CONVERSATION, []], r"messages\[1\]"),
        ([CONVERSATION, {"role": "user", "content": "x"}], r"messages\[1\]"),
        (["not a message"], r"messages\[0\]"),
        ([["not a message"]], "chat template failed"),
    ],
)
def test_malformed_messages_are_a_value_error(qwen3_llm, messages, match):
    with pytest.raises(ValueError, match=match):
        qwen3_llm.chat(messages, GREEDY)


def test_continue_and_generation_prompt_together_are_refused(qwen3_llm):
    with pytest.raises(ValueError, match="continue_final_message"):
        qwen3_llm.chat(CONVERSATION, GREEDY, continue_final_message=True)


def test_a_model_without_a_template_needs_one_given(no_template_model):
    llm = LLM(str(no_template_model), max_model_len=128, num_kv_blocks=64)
    with pytest.raises(ValueError, match="no chat template"):
        llm.chat(CONVERSATION, GREEDY)
    [out] = llm.chat(CONVERSATION, GREEDY, chat_template="chatml")  # a shipped template by name
    assert out.prompt.startswith("<|im_start|>system\nYou answer briefly.<|im_end|>\n")


def test_documents_reach_a_retrieval_template_as_transformers_passes_them(qwen3_llm, hf_tokenizer):
    template = (
        "{% for d in documents %}[doc {{ d.title }}] {{ d.text }}\n{% endfor %}"
        "{% for message in messages %}<|im_start|>{{ message['role'] }}\n{{ message['content'] }}<|im_end|>\n{% endfor %}"
    )
    documents = [{"title": "json", "text": "The json module encodes and decodes JSON."}]
    [out] = qwen3_llm.chat(CONVERSATION, GREEDY, chat_template=template, chat_template_kwargs={"documents": documents})
    expected = hf_tokenizer.apply_chat_template(
        CONVERSATION, tokenize=False, add_generation_prompt=True, chat_template=template, documents=documents
    )
    assert out.prompt == expected and "[doc json]" in out.prompt


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"chat_template_kwargs": {"tokenize": True}}, "may not set tokenize"),
        ({"chat_template_kwargs": {"add_generation_prompt": False}}, "may not set add_generation_prompt"),
    ],
)
def test_what_the_rendering_sets_itself_is_refused_not_dropped(qwen3_llm, kwargs, match):
    with pytest.raises(ValueError, match=match):
        qwen3_llm.chat(CONVERSATION, GREEDY, **kwargs)


def test_an_image_part_is_refused_not_dropped(qwen3_llm):
    """The engine reads text only: a template that loops over content parts would render the text alone."""
    image = {"type": "image_url", "image_url": {"url": "http://x/cat.png"}}
    messages = [{"role": "user", "content": [image, {"type": "text", "text": "hi"}]}]
    with pytest.raises(ValueError, match=r"only text content parts are supported \(.*\), got 'image_url'"):
        qwen3_llm.chat(messages, GREEDY)


@pytest.mark.parametrize("part", [{"type": "text"}, {"type": "text", "text": 5}, {"type": "refusal", "text": "no"}])
def test_a_text_part_without_its_text_is_refused(qwen3_llm, part):
    """Else the parts' Python repr would have been the prompt."""
    with pytest.raises(ValueError, match="content part needs a string"):
        qwen3_llm.chat([{"role": "user", "content": [part]}], GREEDY)


def test_parts_that_are_text_render_as_text(qwen3_llm):
    """input_text and output_text (the Responses API's) and an assistant's refusal count as text, as on the
    server; a part without a type is a text part."""
    parts = [
        {"role": "user", "content": [{"type": "input_text", "text": "What is"}, {"text": " json?"}]},
        {"role": "assistant", "content": [{"type": "refusal", "refusal": "I cannot say."}]},
        {"role": "user", "content": [{"type": "output_text", "text": "Please."}]},
    ]
    plain = [
        {"role": "user", "content": "What is\n json?"},
        {"role": "assistant", "content": "I cannot say."},
        {"role": "user", "content": "Please."},
    ]
    [mine] = qwen3_llm.chat(parts, GREEDY)
    [theirs] = qwen3_llm.chat(plain, GREEDY)
    assert mine.prompt == theirs.prompt


# Llama 3.1's way with tools: an empty list of them is still a tool-calling prompt (`tools is not none`), and a
# call's arguments are written with tojson
CALLS_TEMPLATE = (
    "{% if tools is not none %}[{{ tools | length }} tools]\n{% endif %}"
    "{% for message in messages %}<|im_start|>{{ message.role }}\n"
    "{% for call in message.tool_calls or [] %}"
    '{"name": "{{ call.function.name }}", "parameters": {{ call.function.arguments | tojson }}}'
    "{% endfor %}{{ message.content or '' }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)


def _history(arguments) -> list[dict]:
    """A tool-calling conversation whose call carries `arguments`."""
    call = {"id": "c1", "type": "function", "function": {"name": "get_weather", "arguments": arguments}}
    return [
        {"role": "user", "content": "Weather in Paris?"},
        {"role": "assistant", "content": None, "tool_calls": [call]},
        {"role": "tool", "tool_call_id": "c1", "content": "22 C"},
    ]


def test_call_arguments_sent_as_json_text_reach_the_template_as_objects(qwen3_llm, hf_tokenizer):
    """OpenAI's API carries a call's arguments as JSON text, in a dict or in the openai package's reply message
    appended to the history: the template gets the object, as vLLM (and the server) give it, not the text,
    which tojson would print encoded twice."""
    from openai.types.chat import ChatCompletionMessage

    history = _history('{"city": "Paris"}')
    expected = hf_tokenizer.apply_chat_template(
        _history({"city": "Paris"}),
        tools=TOOLS,
        chat_template=CALLS_TEMPLATE,
        tokenize=False,
        add_generation_prompt=True,
    )
    reply = ChatCompletionMessage.model_validate(history[1])
    for messages in (history, [history[0], reply, history[2]]):
        [out] = qwen3_llm.chat(messages, GREEDY, chat_template=CALLS_TEMPLATE, tools=TOOLS)
        assert out.prompt == expected and '"parameters": {"city": "Paris"}' in out.prompt


def test_pydantic_messages_are_continued_and_shaped_as_dicts(qwen3_llm, hf_tokenizer):
    """A pydantic message (the openai package's ChatCompletionMessage, its unset fields None) is the dict it
    dumps to, as transformers reads it: continue_final_message goes on from it, its text parts are one text."""
    from openai.types.chat import ChatCompletionMessage
    from pydantic import BaseModel

    partial = [CONVERSATION[1], ChatCompletionMessage(role="assistant", content="It is")]
    [out] = qwen3_llm.chat(partial, GREEDY, add_generation_prompt=False, continue_final_message=True)
    assert out.prompt == hf_tokenizer.apply_chat_template(partial, tokenize=False, continue_final_message=True)
    assert out.prompt_token_ids == _hf_ids(hf_tokenizer, partial, continue_final_message=True)

    class Part(BaseModel):
        type: str = "text"
        text: str

    class Message(BaseModel):
        role: str
        content: list[Part]

    [out] = qwen3_llm.chat([Message(role="user", content=[Part(text="a"), Part(text="b")])], GREEDY)
    assert out.prompt == hf_tokenizer.apply_chat_template(
        [{"role": "user", "content": "a\nb"}], tokenize=False, add_generation_prompt=True
    )


def test_an_empty_tool_list_reaches_the_template(qwen3_llm, hf_tokenizer):
    """tools=[] is given, not absent: transformers and vLLM pass it, and `tools is not none` renders it."""
    for tools in (None, []):
        [out] = qwen3_llm.chat(CONVERSATION, GREEDY, chat_template=CALLS_TEMPLATE, tools=tools)
        assert out.prompt == hf_tokenizer.apply_chat_template(
            CONVERSATION, tools=tools, chat_template=CALLS_TEMPLATE, tokenize=False, add_generation_prompt=True
        )
    assert out.prompt.startswith("[0 tools]\n")


@pytest.fixture(scope="module")
def named_llm(tiny_model, named_templates_tokenizer):
    """The tiny Qwen3 with a tokenizer of named chat templates (`default` and `tool_use`)."""
    return LLM(str(tiny_model("qwen3")), tokenizer=str(named_templates_tokenizer()), kv_cache_memory=1 << 24)


@pytest.mark.parametrize("tools", [None, [], TOOLS], ids=["no tools", "empty tools", "tools"])
def test_of_named_templates_the_one_transformers_picks_renders(named_llm, named_templates_tokenizer, tools):
    """`tool_use` when tools are given (an empty list too) and the tokenizer has one, else `default`."""
    hf = AutoTokenizer.from_pretrained(str(named_templates_tokenizer()))
    [out] = named_llm.chat(CONVERSATION, GREEDY, tools=tools)
    assert out.prompt == hf.apply_chat_template(CONVERSATION, tools=tools, tokenize=False, add_generation_prompt=True)
    assert out.prompt_token_ids == _hf_ids(hf, CONVERSATION, tools=tools, add_generation_prompt=True)
    assert ("# Tools" in out.prompt) == (tools is not None)


def test_named_templates_without_a_default_need_one_given(tiny_model, named_templates_tokenizer):
    llm = LLM(
        str(tiny_model("qwen3")), tokenizer=str(named_templates_tokenizer(default=False)), kv_cache_memory=1 << 24
    )
    with pytest.raises(ValueError, match=r"named chat templates \(tool_use\) have no 'default'"):
        llm.chat(CONVERSATION, GREEDY)
    assert "# Tools" in llm.chat(CONVERSATION, GREEDY, tools=TOOLS)[0].prompt
    [out] = llm.chat(CONVERSATION, GREEDY, chat_template="chatml")
    assert out.prompt.startswith("<|im_start|>system\nYou answer briefly.<|im_end|>\n")
