"""A tokenizer that adds a BOS to every text (as Llama's, Mistral's and Gemma's do), through the live server.

The echoed prompt is the text as sent, without the BOS the tokenizer added: text_offset must index that
text (lm-evaluation-harness reads it), and vLLM's `add_special_tokens` says whether the BOS is added at
all (false for a prompt that already holds it). The reference is transformers' tokenizer of the same files.
"""

from __future__ import annotations

import shutil

import httpx
import pytest
from tokenizers import processors
from transformers import AutoTokenizer

from model_optimizer.runtime.server.config import ServerConfig
from tests.runtime.server.live import start_server

BOS = "<|endoftext|>"
TEXT = "Hello there, world"


@pytest.fixture(scope="module")
def model_dir(tiny_model, tmp_path_factory):
    folder = tmp_path_factory.mktemp("bos") / "qwen3-bos"
    shutil.copytree(tiny_model("qwen3"), folder)
    tokenizer = AutoTokenizer.from_pretrained(folder)
    bos_id = tokenizer.convert_tokens_to_ids(BOS)
    tokenizer.backend_tokenizer.post_processor = processors.TemplateProcessing(
        single=f"{BOS} $A", pair=f"{BOS} $A $B:1", special_tokens=[(BOS, bos_id)]
    )
    tokenizer.save_pretrained(folder)
    return folder


@pytest.fixture(scope="module")
def hf(model_dir):
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    assert tokenizer(TEXT)["input_ids"][0] == tokenizer.convert_tokens_to_ids(BOS)  # the fixture adds one
    return tokenizer


@pytest.fixture(scope="module")
def client(model_dir):
    from model_optimizer import LLM

    llm = LLM(str(model_dir), dtype="float32", max_model_len=128, num_kv_blocks=64)
    server = start_server(llm, ServerConfig(served_model_name="tiny"))
    with httpx.Client(base_url=server.url, timeout=120) as c:
        yield c
    server.stop()


def _complete(client: httpx.Client, **body) -> dict:
    response = client.post("/v1/completions", json={"model": "tiny", "temperature": 0, **body})
    assert response.status_code == 200, response.text
    return response.json()


@pytest.mark.parametrize("max_tokens", [0, 3])
def test_echoed_offsets_index_the_echoed_text(client, hf, max_tokens):
    out = _complete(client, prompt=TEXT, echo=True, logprobs=1, max_tokens=max_tokens, ignore_eos=True)
    choice = out["choices"][0]
    text, lp = choice["text"], choice["logprobs"]
    assert text.startswith(TEXT) and lp["tokens"][0] == BOS
    offsets = lp["text_offset"]
    assert offsets == sorted(offsets) and all(0 <= o <= len(text) for o in offsets)
    num_prompt = len(hf(TEXT)["input_ids"])
    assert offsets[1] == 0  # the BOS is not in the echoed text: it takes no width
    for token, at in zip(lp["tokens"][1:num_prompt], offsets[1:num_prompt]):
        assert text[at:].startswith(token)
    assert all(at >= len(TEXT) for at in offsets[num_prompt:])


def test_add_special_tokens_says_whether_the_bos_is_added(client, hf):
    with_bos = _complete(client, prompt=TEXT, max_tokens=1)["usage"]["prompt_tokens"]
    without = _complete(client, prompt=TEXT, max_tokens=1, add_special_tokens=False)["usage"]["prompt_tokens"]
    assert with_bos == len(hf(TEXT)["input_ids"])
    assert without == len(hf(TEXT, add_special_tokens=False)["input_ids"]) == with_bos - 1
    held = _complete(client, prompt=BOS + TEXT, max_tokens=1, add_special_tokens=False)["usage"]["prompt_tokens"]
    assert held == with_bos  # a prompt that holds its BOS is not given a second one


def test_chat_adds_special_tokens_only_when_asked(client):
    body = {"model": "tiny", "messages": [{"role": "user", "content": TEXT}], "max_tokens": 1}
    usage = [
        client.post("/v1/chat/completions", json={**body, **extra}).json()["usage"]["prompt_tokens"]
        for extra in ({}, {"add_special_tokens": True})
    ]
    assert usage[1] == usage[0] + 1  # vLLM's chat default is false: the template writes its own
