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


def test_a_decoder_embeds_with_the_engine_weights_and_still_generates(tiny_model):
    from model_optimizer import SamplingParams
    from model_optimizer.runtime.embed import Embedder

    folder = str(tiny_model("qwen3"))
    llm = LLM(folder, kv_cache_memory=1 << 22)
    greedy = SamplingParams(temperature=0, max_tokens=8, ignore_eos=True)
    before = llm.generate([[5, 6, 7, 8]], greedy)[0].outputs[0].token_ids
    texts = ["hello world", "Paged attention keeps the KV cache in blocks.", "x"]
    ours = torch.tensor(llm.embed(texts))
    assert llm._embedder.backbone.model is llm.runner.model.model  # loaded once, not a second copy
    separate = torch.tensor(Embedder(folder, device="cpu").embed(texts))
    assert torch.nn.functional.cosine_similarity(ours, separate).min() > 0.99999
    assert llm.generate([[5, 6, 7, 8]], greedy)[0].outputs[0].token_ids == before  # its attention still pages
