"""The host KV tier end to end on the CPU: a prefix evicted from a small GPU pool comes back from host
memory (loaded, not recomputed) and greedy output is what recomputing it gives."""

from __future__ import annotations

import pytest

from model_optimizer import LLM, SamplingParams

GREEDY = SamplingParams(temperature=0, max_tokens=8)
PREFIX = [(i * 37) % 900 + 5 for i in range(24)]  # six blocks of 4
FIRST, OTHER, AGAIN = PREFIX + [1, 2, 3], [(i * 53) % 900 + 7 for i in range(40)], PREFIX + [9, 8, 7, 6]


def run(model_dir: str, **kwargs) -> tuple[LLM, list[list[int]], int]:
    """(engine, greedy tokens of FIRST, OTHER and AGAIN in turn, AGAIN's cached prompt tokens)."""
    llm = LLM(model_dir, dtype="float32", block_size=4, num_kv_blocks=16, max_model_len=64, max_num_seqs=1, **kwargs)
    outputs = [llm.generate([prompt], GREEDY)[0] for prompt in (FIRST, OTHER, AGAIN)]
    return llm, [o.outputs[0].token_ids for o in outputs], outputs[-1].num_cached_tokens


def test_evicted_prefix_is_loaded_from_host_memory_with_the_same_output(tiny_model):
    model_dir = str(tiny_model("qwen3"))
    _, recomputed, cached_without = run(model_dir)
    llm, outputs, cached_with = run(model_dir, kv_offloading_size=1e-3)
    assert outputs == recomputed
    assert cached_with == len(PREFIX) > cached_without  # the whole prefix hit: on the GPU, then in host memory
    assert llm.engine.stats().host_kv_hits == cached_with - cached_without  # OTHER evicted those blocks
    assert llm.runner.host_kv.num_blocks > 0


def test_bad_settings_are_clear_errors(tiny_model):
    with pytest.raises(ValueError, match="kv_offloading_size must be a number of GiB >= 0"):
        LLM(str(tiny_model("qwen3")), kv_offloading_size=-1)
    with pytest.raises(ValueError, match="needs enable_prefix_caching"):
        LLM(str(tiny_model("qwen3")), kv_offloading_size=1, enable_prefix_caching=False)
    with pytest.raises(ValueError, match="holds no KV block"):
        LLM(str(tiny_model("qwen3")), kv_offloading_size=1e-12, kv_cache_memory=1 << 22)


@pytest.mark.parametrize("batched, staging_bytes", [(False, None), (True, None), (True, 1)])
def test_copies_move_bits_whatever_the_dtype(batched, staging_bytes, monkeypatch):
    """fp8 caches (no index_select on the CPU) copy as bytes; saves then loads restore the blocks exactly,
    layer by layer or with every layer's blocks staged together (the path GPUs take), in one transfer or
    in several when the step's blocks exceed the staging size."""
    import torch

    from model_optimizer.runtime.runner import host_kv_cache
    from model_optimizer.runtime.runner.host_kv_cache import HostKVCache

    if staging_bytes is not None:
        monkeypatch.setattr(host_kv_cache, "STAGING_BYTES", staging_bytes)

    for dtype in (torch.float8_e4m3fn, torch.bfloat16, torch.float32):
        caches = [torch.randn(2, 6, 4, 2, 8).to(dtype) for _ in range(3)]
        before = [c.clone() for c in caches]
        tier = HostKVCache(caches, 3, torch.device("cpu"))
        tier.batched = batched
        tier.apply([(1, 0), (4, 2)], [])
        for cache in caches:
            cache.zero_()
        tier.apply([], [(2, 5), (0, 3)])
        for cache, old in zip(caches, before):
            assert torch.equal(cache[:, 5].view(torch.uint8), old[:, 4].view(torch.uint8))
            assert torch.equal(cache[:, 3].view(torch.uint8), old[:, 1].view(torch.uint8))
