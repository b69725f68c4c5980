"""Tools and the messages of a tool-calling conversation reach the chat template as transformers passes them:
`tools` as OpenAI's function definitions, an assistant's tool calls with their arguments as objects, a
tool message with its call id."""

from __future__ import annotations

import json

from model_optimizer.runtime.engine.input_processor import chat_text
from model_optimizer.runtime.server.prompts import message_dicts
from model_optimizer.runtime.server.protocol_chat import ChatCompletionRequest

# the shape of Qwen2.5's template: tools as JSON in the system turn, calls in <tool_call> tags, results in
# <tool_response> tags of a user turn
QWEN_LIKE = (
    "{%- if tools %}<|im_start|>system\n# Tools\n<tools>{% for tool in tools %}\n{{ tool | tojson }}{% endfor %}"
    "\n</tools><|im_end|>\n{%- endif %}"
    "{%- for message in messages %}"
    "{%- if message.role == 'assistant' and message.tool_calls %}\n<|im_start|>assistant\n{{ message.content }}"
    "{%- for call in message.tool_calls %}\n<tool_call>\n"
    '{"name": "{{ call.function.name }}", "arguments": {{ call.function.arguments | tojson }}}\n</tool_call>'
    "{%- endfor %}<|im_end|>"
    "{%- elif message.role == 'tool' %}\n<|im_start|>user\n<tool_response>\n{{ message.content }}\n"
    "</tool_response><|im_end|>"
    "{%- else %}\n<|im_start|>{{ message.role }}\n{{ message.content }}<|im_end|>{%- endif %}"
    "{%- endfor %}\n<|im_start|>assistant\n"
)


def test_tools_calls_and_results_render():
    from model_optimizer.assets import reference_model_path
    from model_optimizer.runtime.models.tokenizer import load_tokenizer

    tokenizer = load_tokenizer(reference_model_path())
    body = ChatCompletionRequest.model_validate(
        {
            "messages": [
                {"role": "user", "content": "Weather in Oslo?"},
                {
                    "role": "assistant",
                    "content": None,
                    "tool_calls": [
                        {
                            "id": "call_7",
                            "type": "function",
                            "function": {"name": "get_weather", "arguments": '{"city": "Oslo"}'},
                        }
                    ],
                },
                {"role": "tool", "tool_call_id": "call_7", "content": "rain, 4 C"},
            ],
            "tools": [{"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object"}}}],
        }
    )
    tools = [t.model_dump(exclude_none=True) for t in body.tools]
    text = chat_text(tokenizer, message_dicts(body.messages), QWEN_LIKE, tools=tools)
    assert json.dumps(tools[0]) in text  # the definitions, as the template wrote them with tojson
    assert '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Oslo"}}\n</tool_call>' in text  # an object
    assert "<tool_response>\nrain, 4 C\n</tool_response>" in text
    assert message_dicts(body.messages)[2]["tool_call_id"] == "call_7"


def test_continue_final_message_ends_the_prompt_inside_the_last_message():
    """vLLM's continue_final_message (a prefill): the text stops where the last message's content does, so
    the model goes on with it; with add_generation_prompt too, or with no text to go on from, an error."""
    import pytest

    from model_optimizer.assets import reference_model_path
    from model_optimizer.runtime.models.tokenizer import load_tokenizer

    tokenizer = load_tokenizer(reference_model_path())
    messages = [{"role": "user", "content": "Weather in Oslo?"}, {"role": "assistant", "content": '{"city": "'}]
    text = chat_text(tokenizer, messages, QWEN_LIKE, add_generation_prompt=False, continue_final_message=True)
    assert text.endswith('<|im_start|>assistant\n{"city": "')
    assert '{"city": "<|im_end|>' in chat_text(tokenizer, messages, QWEN_LIKE, add_generation_prompt=False)
    with pytest.raises(ValueError, match="add_generation_prompt false"):
        chat_text(tokenizer, messages, QWEN_LIKE, continue_final_message=True)
    with pytest.raises(ValueError, match="text to go on from"):
        chat_text(tokenizer, [*messages[:1], {"role": "assistant"}], QWEN_LIKE,
                  add_generation_prompt=False, continue_final_message=True)  # fmt: skip
    blank = chat_text(tokenizer, [*messages[:1], {"role": "assistant", "content": " "}], QWEN_LIKE,
                      add_generation_prompt=False, continue_final_message=True)  # fmt: skip
    assert blank.endswith("<|im_start|>assistant\n ")  # whitespace is text to go on from, as in transformers 5
    kwargs = {"nested": {"a": [1, 2]}, "tokenize": True}  # JSON values reach the template; its own names never
    assert "[1, 2]" in chat_text(tokenizer, messages, "{{ nested.a }}", template_kwargs=kwargs)


def test_a_call_without_arguments_reaches_the_template_as_an_empty_object():
    """A stream cut before a call's arguments leaves them "": templates that loop over them need an object."""
    from model_optimizer.assets import reference_model_path
    from model_optimizer.runtime.models.tokenizer import load_tokenizer

    body = ChatCompletionRequest.model_validate(
        {
            "messages": [
                {
                    "role": "assistant",
                    "content": None,
                    "tool_calls": [{"id": "c", "type": "function", "function": {"name": "f", "arguments": " "}}],
                }
            ]
        }
    )
    template = "{% for m in messages %}{{ m.tool_calls[0].function.arguments | tojson }}{% endfor %}"
    assert chat_text(load_tokenizer(reference_model_path()), message_dicts(body.messages), template, False) == "{}"


def test_a_developer_message_is_the_system_s_for_a_template_without_that_role():
    body = ChatCompletionRequest.model_validate(
        {"messages": [{"role": "developer", "content": "be terse"}, {"role": "user", "content": "q"}]}
    )
    assert [m["role"] for m in message_dicts(body.messages, developer_as_system=True)] == ["system", "user"]
    assert [m["role"] for m in message_dicts(body.messages)] == ["developer", "user"]  # a template that has it
