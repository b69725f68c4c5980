"""Chatting with the Gemma 2 and Phi-3 releases as users do: Gemma 2's template refuses a system turn (and turns
out of order) with its own words, which LLM.chat raises as a ValueError and the server answers as a 400 on
every route that renders messages; the releases' generation_config.json stop ids (Phi-3's <|end|>, Gemma 2's
<end_of_turn>) end an output where config.json's single eos id would not."""

from __future__ import annotations

import json
from pathlib import Path

import httpx
import pytest

from model_optimizer import LLM, SamplingParams
from model_optimizer.runtime.server.config import ServerConfig
from tests.runtime.models.real_configs import CONFIGS, GENERATION_CONFIGS
from tests.runtime.server.live import start_server
from tests.runtime.server.test_errors import assert_error

GEMMA2_TEMPLATE = (
    "{{ bos_token }}{% if messages[0]['role'] == 'system' %}{{ raise_exception('System role not supported') }}"
    "{% endif %}{% for message in messages %}{% if (message['role'] == 'user') != (loop.index0 % 2 == 0) %}"
    "{{ raise_exception('Conversation roles must alternate user/assistant/user/assistant/...') }}{% endif %}"
    "{% if (message['role'] == 'assistant') %}{% set role = 'model' %}{% else %}{% set role = message['role'] %}"
    "{% endif %}{{ '<start_of_turn>' + role + '\n' + message['content'] | trim + '<end_of_turn>\n' }}{% endfor %}"
    "{% if add_generation_prompt %}{{'<start_of_turn>model\n'}}{% endif %}"
)
"""The chat template of gemma-2-2b-it, -9b-it and -27b-it."""
SYSTEM_FIRST = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"}]
OUT_OF_ORDER = [{"role": "user", "content": "Hi"}, {"role": "user", "content": "again"}]


def _transformers_refusal(model_dir: Path, messages: list[dict]) -> str:
    """What transformers' apply_chat_template raises for `messages` under Gemma 2's template."""
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(str(model_dir))
    with pytest.raises(Exception) as refused:
        tokenizer.apply_chat_template(messages, chat_template=GEMMA2_TEMPLATE, tokenize=False)
    return str(refused.value)


@pytest.fixture(scope="module")
def gemma2(tiny_model):
    return LLM(str(tiny_model("gemma2")), dtype="float32", kv_cache_memory=1 << 22, max_model_len=256)


@pytest.mark.parametrize("messages", [SYSTEM_FIRST, OUT_OF_ORDER], ids=["system", "out_of_order"])
def test_llm_chat_raises_the_templates_own_words(gemma2, tiny_model, messages):
    reason = _transformers_refusal(tiny_model("gemma2"), messages)
    assert reason.startswith(("System role not supported", "Conversation roles must alternate"))
    with pytest.raises(ValueError, match="the chat template failed on these messages") as refused:
        gemma2.chat(messages, chat_template=GEMMA2_TEMPLATE, use_tqdm=False)
    assert reason in str(refused.value)
    [out] = gemma2.chat(messages[1:], SamplingParams(max_tokens=2), chat_template=GEMMA2_TEMPLATE, use_tqdm=False)
    assert "<start_of_turn>user\n" in out.prompt and out.prompt.endswith("<start_of_turn>model\n")


@pytest.fixture(scope="module")
def gemma2_server(gemma2):
    live = start_server(gemma2, ServerConfig(chat_template=GEMMA2_TEMPLATE))
    yield live.url
    live.stop()


@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize("role", ["system", "developer"])
def test_the_server_answers_a_system_turn_with_a_400_naming_it(gemma2_server, role, stream):
    """A system turn (and OpenAI's developer turn, which a template without that role reads as system) is the
    client's mistake: 400 with the template's words before any stream starts, never a 500."""
    messages = [{"role": role, "content": "Be brief."}, {"role": "user", "content": "Hi"}]
    body = {"messages": messages, "max_tokens": 2, "stream": stream}
    response = httpx.post(gemma2_server + "/v1/chat/completions", json=body, timeout=60)
    error = assert_error(response, 400, "System role not supported")
    assert error["param"] == "messages"
    ok = httpx.post(gemma2_server + "/v1/chat/completions", json=body | {"messages": messages[1:]}, timeout=60)
    assert ok.status_code == 200, ok.text


def test_the_other_routes_that_render_messages_answer_400_too(gemma2_server):
    """/v1/responses' instructions are a system turn; /tokenize renders messages as chat does."""
    url = gemma2_server
    body = {"input": "Hi", "instructions": "Be brief.", "max_output_tokens": 2}
    assert_error(httpx.post(url + "/v1/responses", json=body, timeout=60), 400, "System role not supported")
    assert_error(httpx.post(url + "/tokenize", json={"messages": SYSTEM_FIRST}, timeout=60), 400, "System role")
    assert_error(httpx.post(url + "/tokenize", json={"messages": OUT_OF_ORDER}, timeout=60), 400, "must alternate")


STOPS = {"Phi-3.5-mini-instruct": (32007, 32001), "gemma-2-9b-it": (107,)}
"""Each release's stop ids that only its generation_config.json names (config.json: 32000; 1)."""
NARROW = {"num_hidden_layers": 1, "hidden_size": 192, "intermediate_size": 256, "num_attention_heads": 2}
NARROW |= {"num_key_value_heads": 1, "head_dim": 96, "max_position_embeddings": 4096}
"""A release's vocabulary and ids, at widths the CPU builds in a moment."""


def _release_folder(root: Path, name: str, generation_config: bool) -> Path:
    folder = root / name
    folder.mkdir(parents=True)
    (folder / "config.json").write_text(json.dumps(CONFIGS[name] | NARROW))
    if generation_config:
        (folder / "generation_config.json").write_text(json.dumps(GENERATION_CONFIGS[name]))
    return folder


@pytest.mark.parametrize("name", sorted(STOPS))
def test_generation_config_stop_ids_end_an_output(name, tmp_path):
    """Each forced token (logit_bias) of STOPS ends the output at once with finish_reason "stop", as vLLM stops on
    generation_config.json's eos ids; without that file they are ordinary tokens (config.json's eos alone)."""
    for shipped in (True, False):
        folder = _release_folder(tmp_path / str(shipped), name, generation_config=shipped)
        llm = LLM(str(folder), load_format="dummy", dtype="float32", max_model_len=64, num_kv_blocks=16)
        for stop in STOPS[name]:
            params = SamplingParams(temperature=0, max_tokens=4, logit_bias={stop: 100.0})
            [out] = llm.generate([[5, 6, 7]], params, use_tqdm=False)
            expected = ([stop], "stop") if shipped else ([stop] * 4, "length")
            assert (out.outputs[0].token_ids, out.outputs[0].finish_reason) == expected
