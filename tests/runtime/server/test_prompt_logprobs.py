"""prompt_logprobs and echo with logprobs on /v1/completions, on a real server, against transformers.

What lm-evaluation-harness sends to score a continuation (`echo: true`, `logprobs`, `max_tokens: 0`)
must give transformers' own log-probabilities of the prompt tokens; so must vLLM's `prompt_logprobs`
field, with chunked prefill and a prefix already in the cache, in process and through the engine-core
process (the message contract between them carries the prompt logprobs).
"""

from __future__ import annotations

import json

import httpx
import openai
import pytest
import torch

from model_optimizer.runtime.config import EngineConfig
from model_optimizer.runtime.server.config import ServerConfig
from tests.runtime.server.live import start_server

TOL = 1e-4
ENGINE_ARGS = dict(dtype="float32", max_model_len=128, num_kv_blocks=256, max_num_batched_tokens=16)
PREFIX = [11, 305, 42, 977, 18, 64, 512, 7, 91, 230, 15, 88, 402, 33, 59, 610, 21, 8]


@pytest.fixture(scope="module")
def model_dir(tiny_model):
    return str(tiny_model("qwen3"))


@pytest.fixture(scope="module")
def live(model_dir):
    from model_optimizer import LLM

    llm = LLM(model_dir, enable_prefix_caching=True, **ENGINE_ARGS)
    server = start_server(llm, ServerConfig(served_model_name="tiny"))
    yield server
    server.stop()


@pytest.fixture(scope="module")
def client(live):
    with httpx.Client(base_url=live.url, timeout=120) as c:
        yield c


@pytest.fixture(scope="module")
def hf(model_dir):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32).eval()
    return model, AutoTokenizer.from_pretrained(model_dir)


def reference(hf, prompt: list[int]) -> torch.Tensor:
    """(P - 1, vocab): transformers' log-probabilities of the distributions of prompt tokens 1 .. P-1."""
    with torch.no_grad():
        logits = hf[0](torch.tensor([prompt])).logits[0].float()
    return torch.log_softmax(logits[:-1], dim=-1)


def complete(client: httpx.Client, **body) -> dict:
    response = client.post("/v1/completions", json={"model": "tiny", "temperature": 0, **body})
    assert response.status_code == 200, response.text
    return response.json()


def assert_prompt_logprobs(hf, prompt: list[int], got: list, k: int) -> None:
    expected = reference(hf, prompt)
    assert len(got) == len(prompt) and got[0] is None
    for row, entry, token_id in zip(expected, got[1:], prompt[1:]):
        mine = entry[str(token_id)]
        assert mine["logprob"] == pytest.approx(row[token_id].item(), abs=TOL)
        assert mine["rank"] == int((row > row[token_id]).sum()) + 1
        assert mine["decoded_token"] == hf[1].decode([token_id])
        for v, t in zip(*row.topk(k)):
            assert entry[str(int(t))]["logprob"] == pytest.approx(v.item(), abs=TOL)


def test_prompt_logprobs_field_matches_transformers_with_chunks_and_a_cached_prefix(client, hf):
    first, second = PREFIX + [3, 4, 5, 6], PREFIX + [700, 701, 702, 703, 704]
    complete(client, prompt=first, max_tokens=2)  # PREFIX's first block is cached now
    body = complete(client, prompt=second, max_tokens=2, prompt_logprobs=3)
    assert_prompt_logprobs(hf, second, body["choices"][0]["prompt_logprobs"], 3)
    plain = complete(client, prompt=second, max_tokens=2)
    assert "prompt_logprobs" not in plain["choices"][0]  # only when asked
    assert plain["choices"][0]["text"] == body["choices"][0]["text"]


def test_echo_with_max_tokens_0_scores_the_prompt_as_lm_eval_asks(live, hf):
    """lm-evaluation-harness's loglikelihood request, through the openai client."""
    text = "The quick brown fox jumps over the lazy dog"
    ids = hf[1](text)["input_ids"]
    api = openai.OpenAI(base_url=live.url + "/v1", api_key="unused", max_retries=0)
    out = api.completions.create(model="tiny", prompt=text, echo=True, logprobs=2, max_tokens=0, temperature=0)
    choice = out.choices[0]
    assert choice.text == text and out.usage.completion_tokens == 0 and out.usage.prompt_tokens == len(ids)
    lp = choice.logprobs
    assert "".join(lp.tokens) == text and len(lp.tokens) == len(ids)
    assert lp.token_logprobs[0] is None and lp.top_logprobs[0] is None
    expected = reference(hf, ids)
    want = expected.gather(1, torch.tensor(ids[1:])[:, None]).squeeze(1)
    assert lp.token_logprobs[1:] == pytest.approx(want.tolist(), abs=TOL)
    assert lp.text_offset == [sum(len(t) for t in lp.tokens[:i]) for i in range(len(ids))]
    for row, top, chosen in zip(expected, lp.top_logprobs[1:], lp.tokens[1:]):
        best = hf[1].decode([int(row.argmax())])
        assert top[best] == pytest.approx(row.max().item(), abs=TOL) and chosen in top
    # the sum over a continuation is what lm-eval reads: the same as transformers' sum
    assert sum(lp.token_logprobs[1:]) == pytest.approx(want.sum().item(), abs=1e-3)


def test_echo_with_logprobs_puts_the_prompt_before_the_generated_tokens(client, hf):
    prompt = PREFIX[:9]
    plain = complete(client, prompt=prompt, max_tokens=3, logprobs=1, ignore_eos=True)["choices"][0]
    echoed = complete(client, prompt=prompt, max_tokens=3, logprobs=1, ignore_eos=True, echo=True)["choices"][0]
    echo_text = hf[1].decode(prompt)
    assert echoed["text"] == echo_text + plain["text"]
    lp = echoed["logprobs"]
    assert len(lp["tokens"]) == len(prompt) + 3 and lp["token_logprobs"][0] is None
    assert lp["tokens"][len(prompt) :] == plain["logprobs"]["tokens"]
    assert lp["token_logprobs"][len(prompt) :] == pytest.approx(plain["logprobs"]["token_logprobs"], abs=TOL)
    assert lp["text_offset"][len(prompt) :] == [len(echo_text) + o for o in plain["logprobs"]["text_offset"]]
    expected = reference(hf, prompt).gather(1, torch.tensor(prompt[1:])[:, None]).squeeze(1)
    assert lp["token_logprobs"][1 : len(prompt)] == pytest.approx(expected.tolist(), abs=TOL)


def stream(url: str, body: dict) -> list[dict]:
    chunks = []
    with httpx.stream(
        "POST", url + "/v1/completions", json={"model": "tiny", **body, "stream": True}, timeout=120
    ) as r:
        assert r.status_code == 200
        for line in r.iter_lines():
            if line.startswith("data: ") and line != "data: [DONE]":
                chunks.append(json.loads(line[6:]))
    return chunks


def joined(chunks: list[dict], index: int = 0) -> dict:
    out = {"text": "", "tokens": [], "token_logprobs": [], "prompt_logprobs": None}
    for chunk in chunks:
        for c in chunk["choices"]:
            if c["index"] != index:
                continue
            out["text"] += c["text"]
            if c.get("prompt_logprobs") is not None:
                assert out["prompt_logprobs"] is None  # once, on the choice's first chunk
                out["prompt_logprobs"] = c["prompt_logprobs"]
            if c["logprobs"]:
                out["tokens"] += c["logprobs"]["tokens"]
                out["token_logprobs"] += c["logprobs"]["token_logprobs"]
    return out


def test_a_stream_carries_the_same_as_the_response(live, client):
    body = dict(prompt=PREFIX, max_tokens=4, logprobs=2, echo=True, prompt_logprobs=1, n=2, seed=3, ignore_eos=True)
    whole = complete(client, **body)["choices"]
    for index in (0, 1):
        got = joined(stream(live.url, {**body, "temperature": 0}), index)
        assert got["text"] == whole[index]["text"]
        assert got["tokens"] == whole[index]["logprobs"]["tokens"]
        assert got["token_logprobs"] == pytest.approx(whole[index]["logprobs"]["token_logprobs"], abs=TOL)
        assert got["prompt_logprobs"] == whole[index]["prompt_logprobs"]


def test_max_tokens_0_without_echo_is_refused(client):
    response = client.post("/v1/completions", json={"model": "tiny", "prompt": "hi", "max_tokens": 0})
    assert response.status_code == 400
    assert response.json()["error"]["param"] == "max_tokens" and "echo" in response.json()["error"]["message"]


def test_through_the_engine_core_process(model_dir, hf):
    config = EngineConfig(model=model_dir, **ENGINE_ARGS)
    server = start_server(None, ServerConfig(served_model_name="tiny"), engine_config=config)
    try:
        assert server.state.core is not None
        with httpx.Client(base_url=server.url, timeout=120) as c:
            prompt = PREFIX + [401, 402, 403]
            body = complete(c, prompt=prompt, max_tokens=0, echo=True, logprobs=1, prompt_logprobs=2)
    finally:
        server.stop()
    assert_prompt_logprobs(hf, prompt, body["choices"][0]["prompt_logprobs"], 2)
    expected = reference(hf, prompt).gather(1, torch.tensor(prompt[1:])[:, None]).squeeze(1)
    assert body["choices"][0]["logprobs"]["token_logprobs"][1:] == pytest.approx(expected.tolist(), abs=TOL)


def test_a_stream_with_max_tokens_0_sends_the_prompt_alone(live, client, hf):
    body = dict(prompt=PREFIX, max_tokens=0, logprobs=1, echo=True, stream_options={"include_usage": True})
    chunks = stream(live.url, body)
    got = joined(chunks)
    assert got["text"] == hf[1].decode(PREFIX)
    assert len(got["tokens"]) == len(PREFIX) and got["token_logprobs"][0] is None
    whole = complete(client, **{k: v for k, v in body.items() if k != "stream_options"})
    assert got["token_logprobs"][1:] == pytest.approx(whole["choices"][0]["logprobs"]["token_logprobs"][1:], abs=TOL)
    assert chunks[-1]["usage"] == {"prompt_tokens": len(PREFIX), "completion_tokens": 0, "total_tokens": len(PREFIX)}
    assert [c["choices"][0]["finish_reason"] for c in chunks if c["choices"]][-1] == "length"
    every = stream(
        live.url, {**body, "n": 2, "stream_options": {"include_usage": True, "continuous_usage_stats": True}}
    )
    assert {c["usage"]["completion_tokens"] for c in every} == {0}  # on every chunk, as in the last one
