"""Serve settings on an embedding folder (mopt serve, LLM): `--quantization` says what to do instead, and
`--max-model-len` applies; none is ignored without a word."""

from __future__ import annotations

import pytest

from model_optimizer.runtime.config import EngineConfig
from model_optimizer.runtime.server.app import load_embedder


def test_on_the_fly_quantization_of_an_embedding_model_is_a_clear_error(minilm_dir):
    with pytest.raises(ValueError, match="quantize it ahead of time"):
        load_embedder(EngineConfig(model=str(minilm_dir), quantization="int8", device="cpu"), minilm_dir)


def test_the_offline_api_refuses_it_too(minilm_dir):
    from model_optimizer import LLM

    with pytest.raises(ValueError, match="quantize it ahead of time"):
        LLM(str(minilm_dir), quantization="int8", device="cpu")


def test_max_model_len_bounds_the_inputs_and_generation_settings_are_named(minilm_dir, caplog):
    """--max-model-len on an embedding folder was ignored (inputs of the model's own 256 tokens went on
    being taken, and 1000, past its 512 positions, was accepted); settings for the KV cache, scheduler or
    speculation were taken without a word."""
    from model_optimizer.runtime.llm_embed import unused_embedding_settings

    embedder = load_embedder(EngineConfig(model=str(minilm_dir), max_model_len=100, device="cpu"), minilm_dir)
    assert embedder.max_seq_length == 100
    with pytest.raises(ValueError, match="exceeds what the model's positions hold"):
        load_embedder(EngineConfig(model=str(minilm_dir), max_model_len=1000, device="cpu"), minilm_dir)
    config = EngineConfig(model=str(minilm_dir), device="cpu", kv_cache_dtype="fp8", enable_prefix_caching=False)
    assert sorted(unused_embedding_settings(config)) == ["enable_prefix_caching", "kv_cache_dtype"]
    assert unused_embedding_settings(EngineConfig(model=str(minilm_dir), device="cpu", dtype="float32")) == []


def test_dummy_weights_are_said_so_in_the_load_line(minilm_dir, caplog):
    """The load line of --load-format dummy read like a real load, while every output is random."""
    import logging

    with caplog.at_level(logging.INFO, logger="model_optimizer.runtime.server.app"):
        load_embedder(EngineConfig(model=str(minilm_dir), load_format="dummy", device="cpu"), minilm_dir)
    assert any("loaded model" in r.message and "random weights" in r.message for r in caplog.records)
