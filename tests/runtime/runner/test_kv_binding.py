"""KV caches are bound to the attention layers once, not passed in each step's metadata."""

from __future__ import annotations

import pytest
import torch

from model_optimizer import LLM
from model_optimizer.runtime.layers.attention import Attention, AttentionMetadata, bind_kv_caches


def test_engine_binds_each_layer_its_own_cache(tiny_model):
    runner = LLM(str(tiny_model("qwen3")), kv_cache_memory=1 << 22).runner
    layers = [m for m in runner.model.modules() if isinstance(m, Attention)]
    assert len(layers) == len(runner.kv_caches) == runner.args.num_layers
    assert all(layer.kv_cache is runner.kv_caches[layer.layer_idx] for layer in layers)
    with pytest.raises(ValueError, match="1 KV caches for a model with 2 attention layers"):
        bind_kv_caches(runner.model, runner.kv_caches[:1])


def test_unbound_layer_names_what_is_missing_and_scratch_caches_still_work():
    layer = Attention(0, num_heads=2, num_kv_heads=1, head_dim=8, sliding_window=None)
    q, kv = torch.randn(3, 2, 8), torch.randn(3, 1, 8)
    scratch = [torch.zeros(2, 1, 4, 1, 8)]
    meta = AttentionMetadata.for_prefill([3], block_size=4, kv_caches=scratch, device=torch.device("cpu"))
    assert layer(q, kv, kv, meta).shape == (3, 16)  # a forward outside the engine brings its own caches
    assert scratch[0][0, 0, :3].abs().sum() > 0  # ... and stores into them
    meta.kv_caches = None
    with pytest.raises(RuntimeError, match="attention layer 0 has no KV cache"):
        layer(q, kv, kv, meta)
