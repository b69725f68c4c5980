"""What Embedder.embed and LLM.embed take, on the real MiniLM: bytes are a TypeError (their byte values are no
token ids), a lone surrogate is named, NumPy integers are token ids, and vLLM's PoolingParams(normalize=False)
returns the pooled vectors as sentence-transformers does without its Normalize module."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from model_optimizer import LLM, PoolingParams


@pytest.fixture(scope="module")
def llm(minilm_dir):
    return LLM(str(minilm_dir))


def _vectors(outputs) -> torch.Tensor:
    return torch.tensor([o.outputs.embedding for o in outputs])


@pytest.mark.parametrize(
    "bad, message",
    [
        (b"hello", "inputs must be a string, a list of token ids, or a list of those, got bytes"),
        (bytearray(b"hello"), "got bytearray"),
        (["fine", b"hello"], "input 1 must be a string or a list of token ids, got bytes"),
        (None, "got NoneType"),
        (7, "got int"),
    ],
)
def test_bytes_and_non_inputs_are_a_type_error(minilm, llm, bad, message):
    with pytest.raises(TypeError, match=message):
        minilm.embed(bad)
    with pytest.raises(TypeError, match=message):
        llm.embed(bad, use_tqdm=False)


def test_a_lone_surrogate_is_named_not_a_tokenizer_type_error(minilm, llm):
    named = r"input 1 is not valid Unicode text \(a lone surrogate such as \\ud800 at character 1\)"
    with pytest.raises(ValueError, match=named):
        minilm.embed(["fine", "a\ud800b"])
    with pytest.raises(ValueError, match=named):
        llm.embed(["fine", "a\ud800b"], use_tqdm=False)
    with pytest.raises(ValueError, match="instruction is not valid Unicode text"):
        minilm.embed("fine", instruction="find \udc80")


def test_numpy_integers_are_token_ids(minilm, llm):
    ids = minilm.tokenizer("numpy ids are ids")["input_ids"]
    want = torch.tensor(minilm.embed([ids]))
    for given in ([[np.int64(t) for t in ids]], np.array(ids), [tuple(np.int32(t) for t in ids)]):
        assert torch.allclose(torch.tensor(minilm.embed(given)), want, atol=1e-6)
    [out] = llm.embed({"prompt_token_ids": [np.int64(t) for t in ids]}, use_tqdm=False)
    assert out.prompt_token_ids == ids and all(type(t) is int for t in out.prompt_token_ids)
    with pytest.raises(ValueError, match="input 0 must be a string or a list of token ids"):
        minilm.embed([[True, False]])  # a bool is no token id


def test_normalize_false_gives_the_pooled_vectors(minilm, llm, sentence_transformer):
    from sentence_transformers import SentenceTransformer

    texts = ["A cat sits on the mat.", "Paged attention keeps the KV cache in blocks.", "¿Qué tal? 😀"]
    pooled_only = SentenceTransformer(modules=[sentence_transformer[0], sentence_transformer[1]], device="cpu")
    want = torch.tensor(pooled_only.encode(texts, normalize_embeddings=False))
    got = torch.tensor(minilm.embed(texts, normalize=False))
    assert (got.norm(dim=-1) - 1).abs().min() > 0.05  # not unit vectors
    assert (got - want).abs().max() <= 1e-4 * want.abs().max()
    outputs = llm.embed(texts, pooling_params=PoolingParams(normalize=False), use_tqdm=False)
    assert torch.allclose(_vectors(outputs), got, atol=1e-6)
    unit = _vectors(llm.embed(texts, pooling_params=PoolingParams(normalize=True), use_tqdm=False))
    assert torch.allclose(unit, torch.nn.functional.normalize(got, dim=-1), atol=1e-6)
    with pytest.raises(ValueError, match="normalize must be True, False or None"):
        minilm.embed("x", normalize="no")


def test_a_length_past_the_positions_is_named_every_way_it_is_given(minilm_dir):
    from model_optimizer.runtime.embed import Embedder

    named = r"the longest input, 1000 tokens \(--max-model-len of mopt serve, max_model_len of LLM, max_seq_length"
    with pytest.raises(ValueError, match=named):
        Embedder(minilm_dir, device="cpu", max_seq_length=1000)
    with pytest.raises(ValueError, match=named):
        LLM(str(minilm_dir), max_model_len=1000).embed("x", use_tqdm=False)
