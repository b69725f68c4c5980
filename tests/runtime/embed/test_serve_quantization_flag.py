"""`--quantization` on an embedding folder (mopt serve, LLM) says what to do instead of being ignored."""

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
