"""The server renders chat messages as transformers' apply_chat_template does (/tokenize shows the ids chat
completions generate from): of a tokenizer's named templates the one it picks, vLLM's continue_final_message,
and an empty tool list, which is given, not absent."""

from __future__ import annotations

import httpx
import pytest
from transformers import AutoTokenizer

from model_optimizer.runtime.models.tokenizer import load_tokenizer
from model_optimizer.runtime.server.config import ServerConfig
from tests.runtime.server.live import start_server
from tests.runtime.test_llm_chat import TOOLS

MESSAGES = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Weather in Oslo?"}]
# Llama 3.1's test: an empty list of tools still makes a tool-calling prompt
TOOLS_TEMPLATE = (
    "{% if tools is not none %}[{{ tools | length }} tools]\n{% endif %}"
    "{% for message in messages %}<|im_start|>{{ message.role }}\n{{ message.content }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)


def _hf_ids(folder, messages, **kwargs) -> list[int]:
    hf = AutoTokenizer.from_pretrained(str(folder))
    return list(hf.apply_chat_template(messages, tokenize=True, return_dict=True, **kwargs)["input_ids"])


def _tokens(live, **body) -> list[int]:
    response = httpx.post(f"{live.url}/tokenize", json=body, timeout=60)
    assert response.status_code == 200, response.text
    return response.json()["tokens"]


def test_of_named_templates_the_one_transformers_picks_renders(own_llm, swapped_tokenizer, named_templates_tokenizer):
    """`tool_use` when the request has tools (an empty list too), else `default`, as transformers picks."""
    folder = named_templates_tokenizer()
    swapped_tokenizer(lambda _: load_tokenizer(folder))
    live = start_server(own_llm, ServerConfig())
    try:
        for tools in (None, [], TOOLS):
            body = {"messages": MESSAGES} | ({} if tools is None else {"tools": tools})
            assert _tokens(live, **body) == _hf_ids(folder, MESSAGES, tools=tools, add_generation_prompt=True)
    finally:
        live.stop()


def test_named_templates_without_a_default_stop_the_start_up(own_llm, swapped_tokenizer, named_templates_tokenizer):
    """Every chat without tools would fail: the server says so before it serves."""
    folder = named_templates_tokenizer(default=False)
    swapped_tokenizer(lambda _: load_tokenizer(folder))
    with pytest.raises(ValueError, match=r"named chat templates \(tool_use\) have no 'default'"):
        start_server(own_llm, ServerConfig())


def test_tokenize_continues_the_final_message(server, tiny_model):
    """vLLM's continue_final_message on /tokenize: the ids end inside the last message, as chat completions'."""
    partial = [*MESSAGES, {"role": "assistant", "content": "It is"}]
    tokens = _tokens(server, messages=partial, add_generation_prompt=False, continue_final_message=True)
    assert tokens == _hf_ids(tiny_model("qwen3"), partial, continue_final_message=True)
    refused = httpx.post(f"{server.url}/tokenize", json={"messages": partial, "continue_final_message": True})
    assert refused.status_code == 400 and "add_generation_prompt" in refused.json()["error"]["message"]


def test_an_empty_tool_list_reaches_the_template(own_llm, tiny_model):
    """tools=[] through /tokenize and chat completions: the template gets [], as transformers and vLLM pass it."""
    expected = _hf_ids(
        tiny_model("qwen3"), MESSAGES, tools=[], chat_template=TOOLS_TEMPLATE, add_generation_prompt=True
    )
    live = start_server(own_llm, ServerConfig(chat_template=TOOLS_TEMPLATE))
    try:
        tokens = _tokens(live, messages=MESSAGES, tools=[])
        body = {"messages": MESSAGES, "tools": [], "max_tokens": 1}
        usage = httpx.post(f"{live.url}/v1/chat/completions", json=body, timeout=60).json()["usage"]
    finally:
        live.stop()
    assert tokens == expected and usage["prompt_tokens"] == len(expected)
    assert own_llm.tokenizer.decode(tokens).startswith("[0 tools]\n")
