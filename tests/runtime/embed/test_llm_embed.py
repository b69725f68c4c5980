"""`LLM.embed`: the offline API for embeddings, for encoders (no generation engine) and decoders."""

from __future__ import annotations

import pytest
import torch

from model_optimizer import LLM, PoolingParams


def vectors(outputs) -> torch.Tensor:
    return torch.tensor([o.outputs.embedding for o in outputs])


def test_llm_embed_on_minilm_matches_sentence_transformers(minilm_dir, sentence_transformer):
    llm = LLM(str(minilm_dir))
    texts = ["A cat sits on the mat.", "Paged attention keeps the KV cache in blocks.", "¿Qué tal? 😀"]
    outputs = llm.embed(texts)
    ref = torch.tensor(sentence_transformer.encode(texts))
    assert torch.nn.functional.cosine_similarity(vectors(outputs), ref).min() > 0.9999
    tokenizer = sentence_transformer.tokenizer
    assert [o.prompt_token_ids for o in outputs] == [tokenizer(t)["input_ids"] for t in texts]
    assert len({o.request_id for o in outputs}) == 3 and all(o.finished for o in outputs)
    # MiniLM declares no Matryoshka training: `dimensions` is refused, as the server and `mopt embed` refuse it
    with pytest.raises(ValueError, match="dimensions is not supported by this model"):
        llm.embed("one text", dimensions=64)
    with pytest.raises(ValueError, match="dimensions is not supported by this model"):
        llm.embed({"prompt": "one text"}, pooling_params=PoolingParams(dimensions=64))
    with pytest.raises(ValueError, match="give it once"):
        llm.embed("one text", dimensions=32, pooling_params=PoolingParams(dimensions=64))
    with pytest.raises(ValueError, match="one PoolingParams for all inputs"):
        llm.embed(["a", "b"], pooling_params=[PoolingParams(dimensions=32), PoolingParams()])
    with pytest.raises(ValueError, match="is an embedding model"):
        llm.generate(["hello"])


def test_llm_embed_on_a_decoder(tiny_model):
    llm = LLM(str(tiny_model("qwen3")), kv_cache_memory=1 << 22)
    [output] = llm.embed([{"prompt_token_ids": [5, 6, 7]}])
    assert abs(sum(v * v for v in output.outputs.embedding) - 1.0) < 1e-4  # L2-normalised last-token embedding
    assert output.prompt_token_ids[:3] == [5, 6, 7]  # and the end token the folder adds, if any


def test_a_decoder_embeds_with_the_engine_weights_and_still_generates(tiny_model):
    from model_optimizer import SamplingParams
    from model_optimizer.runtime.embed import Embedder

    folder = str(tiny_model("qwen3"))
    llm = LLM(folder, kv_cache_memory=1 << 22)
    greedy = SamplingParams(temperature=0, max_tokens=8, ignore_eos=True)
    before = llm.generate([[5, 6, 7, 8]], greedy)[0].outputs[0].token_ids
    texts = ["hello world", "Paged attention keeps the KV cache in blocks.", "x"]
    ours = vectors(llm.embed(texts))
    assert llm._embedder.backbone.model is llm.runner.model.model  # loaded once, not a second copy
    separate = torch.tensor(Embedder(folder, device="cpu").embed(texts))
    assert torch.nn.functional.cosine_similarity(ours, separate).min() > 0.99999
    assert llm.generate([[5, 6, 7, 8]], greedy)[0].outputs[0].token_ids == before  # its attention still pages


def test_an_engines_max_model_len_bounds_what_it_embeds(tiny_model):
    llm = LLM(str(tiny_model("qwen3")), kv_cache_memory=1 << 22, max_model_len=64)
    with pytest.raises(ValueError, match="64"):
        llm.embed([{"prompt_token_ids": list(range(5, 105))}])
    [cut] = llm.embed([{"prompt_token_ids": list(range(5, 105))}], truncate_prompt_tokens=-1)
    assert len(cut.prompt_token_ids) <= 64


def test_llm_on_a_decoder_saved_without_its_lm_head_embeds(qwen3_base_dir, qwen3):
    """A Qwen3Model folder (Qwen3-Embedding's layout: no lm_head) is an embedding model: LLM embeds with it,
    as vLLM's LLM does, and generate says why it cannot (it raised "not supported for generation")."""
    llm = LLM(str(qwen3_base_dir), dtype="float32")
    texts = ["hello world", "Paged attention keeps the KV cache in blocks."]
    assert torch.allclose(vectors(llm.embed(texts)), qwen3.encode(texts).embeddings, atol=1e-5)
    with pytest.raises(ValueError, match="embedding model: use LLM.embed"):
        llm.generate(["hello"])
