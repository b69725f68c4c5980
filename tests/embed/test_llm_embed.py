"""`LLM.embed`: the offline API for embeddings, for encoders (no generation engine) and decoders."""

from __future__ import annotations

import pytest
import torch

from model_optimizer import LLM


def test_llm_embed_on_minilm_matches_sentence_transformers(minilm_dir, sentence_transformer):
    llm = LLM(str(minilm_dir))
    texts = ["A cat sits on the mat.", "Paged attention keeps the KV cache in blocks.", "¿Qué tal? 😀"]
    ours = torch.tensor(llm.embed(texts))
    ref = torch.tensor(sentence_transformer.encode(texts))
    assert torch.nn.functional.cosine_similarity(ours, ref).min() > 0.9999
    assert len(llm.embed("one text", dimensions=64)) == 1 and len(llm.embed("one text", dimensions=64)[0]) == 64
    with pytest.raises(ValueError, match=r"encoder \(embedding\) model"):
        llm.generate(["hello"])


def test_llm_embed_on_a_decoder(tiny_model):
    llm = LLM(str(tiny_model("qwen3")), kv_cache_memory=1 << 22)
    [vector] = llm.embed(["hello world"])
    assert abs(sum(v * v for v in vector) - 1.0) < 1e-4  # L2-normalised last-token embedding
