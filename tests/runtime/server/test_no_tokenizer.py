"""A model folder without tokenizer files, served: token-id prompts work, text needs a tokenizer (400)."""

from __future__ import annotations

import json
import shutil

import httpx
import pytest

from model_optimizer.runtime.server.config import ServerConfig
from tests.runtime.server.live import sse_payloads, start_server
from tests.runtime.server.test_errors import assert_error


@pytest.fixture(scope="module")
def bare_server(tiny_model, tmp_path_factory):
    """The tiny Qwen3 without tokenizer files, loaded with dummy weights (as `--load-format dummy` does)."""
    from model_optimizer import LLM
    from model_optimizer.runtime.models.tokenizer import TOKENIZER_FILES

    out = tmp_path_factory.mktemp("bare") / "qwen3"
    shutil.copytree(tiny_model("qwen3"), out)
    for name in (*TOKENIZER_FILES, "special_tokens_map.json", "chat_template.jinja", "merges.txt"):
        (out / name).unlink(missing_ok=True)
    llm = LLM(str(out), load_format="dummy", max_model_len=128, num_kv_blocks=64)
    assert llm.tokenizer is None
    live = start_server(llm, ServerConfig())
    yield live
    live.stop()


def test_no_tokenizer_text_prompt_is_400(bare_server):
    url = bare_server.url
    for body in ({"prompt": "hello"}, {"prompt": ["a", "b"]}, {"prompt": "hello", "stream": True, "logprobs": 1}):
        error = assert_error(httpx.post(url + "/v1/completions", json={"max_tokens": 2, **body}), 400, "token ids")
        assert error["param"] == "prompt"
    assert_error(
        httpx.post(url + "/v1/completions", json={"prompt": [1, 2], "max_tokens": 2, "echo": True}), 400, "tokenizer"
    )
    assert_error(
        httpx.post(url + "/v1/chat/completions", json={"messages": [{"role": "user", "content": "x"}]}),
        400,
        "tokenizer",
    )


def test_no_tokenizer_logprobs_with_token_ids(bare_server):
    body = {"prompt": [1, 2, 3], "max_tokens": 3, "logprobs": 2, "ignore_eos": True}
    r = httpx.post(bare_server.url + "/v1/completions", json=body, timeout=60)
    assert r.status_code == 200, r.text
    lp = r.json()["choices"][0]["logprobs"]
    assert lp["tokens"] == [None, None, None]
    assert len(lp["token_logprobs"]) == 3 and all(v <= 0 for v in lp["token_logprobs"])
    assert all(all(k.startswith("token_id:") for k in top) for top in lp["top_logprobs"])
    r = httpx.post(bare_server.url + "/v1/completions", json={**body, "stream": True}, timeout=60)
    events = sse_payloads(r)
    assert events[-1] == "[DONE]"
    streamed = [json.loads(e) for e in events[:-1]]
    assert all("error" not in e for e in streamed)
    assert sum(len(e["choices"][0]["logprobs"]["tokens"]) for e in streamed) == 3


def test_no_tokenizer_refuses_structured_outputs(bare_server):
    r = httpx.post(bare_server.url + "/v1/completions", json={"prompt": [1, 2], "max_tokens": 2, "guided_regex": "a"})
    assert assert_error(r, 400, "tokenizer")["param"] == "guided_regex"


def test_no_tokenizer_refuses_stop_strings_but_takes_stop_token_ids(bare_server):
    url = bare_server.url + "/v1/completions"
    for stop in ("\n", ["a", "b"]):
        error = assert_error(httpx.post(url, json={"prompt": [1, 2], "max_tokens": 2, "stop": stop}), 400, "tokenizer")
        assert error["param"] == "stop"
    r = httpx.post(url, json={"prompt": [1, 2], "max_tokens": 2, "stop_token_ids": [3], "stop": []}, timeout=60)
    assert r.status_code == 200, r.text
