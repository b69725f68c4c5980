"""Token streaming: one chunk per engine step with its new token ids (`token_ids`, vLLM's return_token_ids),
also for a model served without a tokenizer, so `mopt bench` can time TTFT and ITL on dummy weights."""

from __future__ import annotations

import json
import shutil

import httpx
import pytest

from model_optimizer.optimizer.bench.client import ClientConfig
from model_optimizer.optimizer.bench.load import RunPlan
from model_optimizer.optimizer.bench.metrics import summarize
from model_optimizer.runtime.server.config import ServerConfig
from tests.optimizer.bench.util import make_requests, run_plan
from tests.runtime.server.live import start_server
from tests.runtime.server.test_errors import assert_error

GREEDY = {"temperature": 0.0, "ignore_eos": True}


@pytest.fixture(scope="module")
def bare_server(tiny_model, tmp_path_factory):
    """The tiny Qwen3 without tokenizer files, with dummy weights (as `--load-format dummy` serves it)."""
    from model_optimizer import LLM
    from model_optimizer.runtime.models.tokenizer import TOKENIZER_FILES

    out = tmp_path_factory.mktemp("bare_tokens") / "qwen3"
    shutil.copytree(tiny_model("qwen3"), out)
    for name in (*TOKENIZER_FILES, "special_tokens_map.json", "chat_template.jinja", "merges.txt"):
        (out / name).unlink(missing_ok=True)
    llm = LLM(str(out), load_format="dummy", max_model_len=128, num_kv_blocks=64)
    assert llm.tokenizer is None
    live = start_server(llm, ServerConfig(served_model_name="bare"))
    yield live
    live.stop()


def stream_chunks(url: str, path: str, body: dict) -> list[dict]:
    """The JSON chunks of a streamed request, checked to end with [DONE] and carry no error."""
    r = httpx.post(url + path, json={**body, "stream": True}, timeout=120)
    assert r.status_code == 200, r.text
    events = [line[len("data: ") :] for line in r.text.split("\n\n") if line.startswith("data: ")]
    assert events[-1] == "[DONE]"
    chunks = [json.loads(e) for e in events[:-1]]
    assert all("error" not in c for c in chunks), chunks
    return chunks


def test_no_tokenizer_streams_one_chunk_per_token_with_its_id(bare_server):
    body = {"prompt": [5, 6, 7, 8], "max_tokens": 6, **GREEDY}
    r = httpx.post(bare_server.url + "/v1/completions", json=body, timeout=120)
    assert r.status_code == 200, r.text
    [choice] = r.json()["choices"]
    full = choice["token_ids"]  # no tokenizer: the ids are the output, sent unasked
    assert len(full) == 6 and choice["text"] == "" and choice["finish_reason"] == "length"

    chunks = stream_chunks(bare_server.url, "/v1/completions", {**body, "stream_options": {"include_usage": True}})
    *token_chunks, usage_chunk = chunks
    assert usage_chunk["choices"] == [] and usage_chunk["usage"]["completion_tokens"] == 6
    ids = [c["choices"][0]["token_ids"] for c in token_chunks]
    assert all(ids)  # a token or more per chunk (more when the reader fell behind: merged)
    assert [t for i in ids for t in i] == full  # greedy: the same ids as the whole response
    assert all(c["choices"][0]["text"] == "" for c in token_chunks)
    assert [c["choices"][0]["finish_reason"] for c in token_chunks] == [None] * (len(ids) - 1) + ["length"]


def test_no_tokenizer_n_choices_each_get_their_ids(bare_server):
    body = {"prompt": [[5, 6], [7, 8, 9]], "max_tokens": 3, "n": 2, "temperature": 1.0, "seed": 3, "ignore_eos": True}
    chunks = stream_chunks(bare_server.url, "/v1/completions", body)
    per_choice: dict[int, list[int]] = {}
    for c in chunks:
        for choice in c["choices"]:
            per_choice.setdefault(choice["index"], []).extend(choice["token_ids"])
    assert sorted(per_choice) == [0, 1, 2, 3] and all(len(v) == 3 for v in per_choice.values())


def test_return_token_ids_on_a_tokenized_model(server):
    body = {"prompt": "The sky is", "max_tokens": 5, **GREEDY}
    plain = httpx.post(server.url + "/v1/completions", json=body, timeout=60).json()
    assert "token_ids" not in plain["choices"][0]  # not asked: left out, not null
    asked = httpx.post(server.url + "/v1/completions", json={**body, "return_token_ids": True}, timeout=60).json()
    [choice] = asked["choices"]
    assert len(choice["token_ids"]) == 5 and choice["text"] == plain["choices"][0]["text"]
    tokenize = httpx.post(server.url + "/detokenize", json={"tokens": choice["token_ids"]}, timeout=60)
    assert tokenize.json()["prompt"] == choice["text"]  # the ids are the ones that made the text

    chunks = stream_chunks(server.url, "/v1/completions", {**body, "return_token_ids": True})
    assert [t for c in chunks for t in c["choices"][0]["token_ids"]] == choice["token_ids"]
    assert "".join(c["choices"][0]["text"] for c in chunks) == choice["text"]
    unasked = stream_chunks(server.url, "/v1/completions", body)
    assert all("token_ids" not in c["choices"][0] for c in unasked)


def test_return_token_ids_in_chat(server):
    body = {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 4, "return_token_ids": True, **GREEDY}
    r = httpx.post(server.url + "/v1/chat/completions", json=body, timeout=60)
    assert r.status_code == 200, r.text
    [choice] = r.json()["choices"]
    assert len(choice["token_ids"]) == 4
    role, *chunks = stream_chunks(server.url, "/v1/chat/completions", body)
    assert "token_ids" not in role["choices"][0]  # the role chunk carries no tokens
    assert [t for c in chunks for t in c["choices"][0]["token_ids"]] == choice["token_ids"]


@pytest.mark.parametrize("path", ["/v1/completions", "/v1/chat/completions"])
def test_return_token_ids_is_a_strict_bool(server, path):
    body = {"max_tokens": 2, "return_token_ids": "yes"}
    body |= {"prompt": "x"} if path == "/v1/completions" else {"messages": [{"role": "user", "content": "x"}]}
    error = assert_error(httpx.post(server.url + path, json=body, timeout=60), 400, "boolean")
    assert error["param"] == "return_token_ids"


def test_openapi_documents_token_ids(server):
    schema = httpx.get(server.url + "/openapi.json", timeout=60).json()["components"]["schemas"]
    assert "return_token_ids" in schema["CompletionRequest"]["properties"]
    assert "token_ids" in schema["CompletionChoice"]["properties"]


def test_bench_times_a_model_without_tokenizer(bare_server):
    """Every request has a TTFT and 5 gaps: its 6 empty-text chunks count as tokens by their ids."""
    records = run_plan(
        bare_server.url, RunPlan("closed", concurrency=2, num_requests=4), make_requests(4, output_len=6), model="bare"
    )
    assert all(r.ok for r in records), [r.error_detail for r in records]
    assert all(r.usage_reported for r in records)
    assert [r.output_tokens for r in records] == [6] * 4
    assert [sum(r.chunk_tokens) for r in records] == [6] * 4  # a chunk may carry several (merged)
    assert all(r.ttft is not None and r.ttft > 0 for r in records)
    s = summarize(records)
    assert s["output_tokens"] == 24 and s["itl_ms"]["count"] == sum(6 - r.chunk_tokens[0] for r in records)
    assert s["ttft_ms"]["p50"] is not None and s["tpot_ms"]["mean"] is not None


def test_bench_sends_return_token_ids_when_asked(server):
    records = run_plan(
        server.url,
        RunPlan("closed", concurrency=1, num_requests=2),
        make_requests(2, output_len=4),
        return_token_ids=True,
    )
    assert all(r.ok and r.output_tokens == 4 and sum(r.chunk_tokens) == 4 for r in records)
    assert ClientConfig().return_token_ids is False  # off by default: OpenAI's API refuses unknown fields
