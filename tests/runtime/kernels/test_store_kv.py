"""Triton store_kv against the torch reference, through the Triton interpreter on the CPU."""

import pytest
import torch

from model_optimizer.runtime.kernels.reference import FP8_DTYPE, store_kv_ref
from model_optimizer.runtime.kernels.store_kv import store_kv


def _inputs(num_tokens, num_kv_heads, head_dim, dtype, seed=0):
    gen = torch.Generator().manual_seed(seed)
    key = torch.randn(num_tokens, num_kv_heads, head_dim, generator=gen).to(dtype)
    value = torch.randn(num_tokens, num_kv_heads, head_dim, generator=gen).to(dtype)
    return key, value


@pytest.mark.parametrize(
    ("dtype", "block_size", "num_kv_heads", "head_dim"),
    [(torch.float32, 16, 2, 32), (torch.bfloat16, 32, 1, 64), (torch.float16, 64, 3, 128)],
)
def test_store_kv_matches_reference_and_skips_padding(dtype, block_size, num_kv_heads, head_dim):
    num_blocks = 6
    cache = torch.randn(2, num_blocks, block_size, num_kv_heads, head_dim).to(dtype)  # poison: random, not zeros
    key, value = _inputs(9, num_kv_heads, head_dim, dtype)
    total = num_blocks * block_size
    slots = torch.tensor([3, -1, total - 1, block_size, 0, -1, 2 * block_size + 5, total - 2, 7])
    expected, actual = cache.clone(), cache.clone()
    store_kv_ref(key, value, expected, slots)
    store_kv(key, value, actual, slots)
    assert torch.equal(actual, expected)
    flat = actual.view(2, total, num_kv_heads, head_dim)
    assert torch.equal(flat[0, 3], key[0]) and torch.equal(flat[1, total - 1], value[2])
    assert torch.equal(flat[:, total - 3], cache.view(2, total, num_kv_heads, head_dim)[:, total - 3])


def test_store_kv_int32_slots_and_strided_key():
    cache = torch.randn(2, 4, 16, 2, 32)
    fused = torch.randn(5, 3, 2, 32)  # a qkv-like buffer: key is a strided view of it
    key, value = fused[:, 1], fused[:, 2]
    slots = torch.tensor([60, -1, 17, 0, 33], dtype=torch.int32)
    expected, actual = cache.clone(), cache.clone()
    store_kv_ref(key, value, expected, slots.long())
    store_kv(key, value, actual, slots)
    assert torch.equal(actual, expected)


def test_store_kv_fp8_scales_and_saturation():
    # values exactly representable in e4m3 after division by a power-of-two scale, plus out-of-range
    # ones that must saturate to +-448: the interpreter's fp32->fp8 rounding is not exact in general,
    # so random-value rounding is checked on the GPU (tests/gpu/test_kernels_gpu.py)
    grid = torch.tensor([0.5, -1.0, 1.5, -3.0, 12.0, -96.0, 448.0, 1e4, -1e4, 0.015625, 240.0, -26.0])
    key = (grid.repeat(2 * 16)[: 2 * 2 * 32].view(2, 2, 32) * 0.25).to(torch.bfloat16)
    value = (grid.flip(0).repeat(2 * 16)[: 2 * 2 * 32].view(2, 2, 32) * 4.0).to(torch.bfloat16)
    k_scale, v_scale = torch.tensor(0.25), torch.tensor(4.0)
    cache = torch.randn(2, 3, 16, 2, 32).to(FP8_DTYPE)
    slots = torch.tensor([40, 5])
    expected, actual = cache.clone(), cache.clone()
    store_kv_ref(key, value, expected, slots, k_scale, v_scale)
    store_kv(key, value, actual, slots, k_scale, v_scale)
    assert torch.equal(actual.view(torch.uint8), expected.view(torch.uint8))
    assert actual.float().abs().max() == 448.0  # 1e4 saturated instead of turning into NaN
    assert not actual.float().isnan().any()


def test_store_kv_rejects_mismatched_shapes():
    cache = torch.randn(2, 4, 16, 2, 32)
    key, value = _inputs(3, 2, 32, torch.float32)
    with pytest.raises(ValueError, match="slot_mapping"):
        store_kv(key, value, cache, torch.tensor([0, 1]))
    with pytest.raises(ValueError, match="key"):
        store_kv(key[:, :1], value[:, :1], cache, torch.tensor([0, 1, 2]))
    with pytest.raises(ValueError, match="kv_cache"):
        store_kv(key, value, cache[0], torch.tensor([0, 1, 2]))
