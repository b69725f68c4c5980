"""Triton qk-norm + rotary against the torch reference, through the Triton interpreter on the CPU; and its
variant that also stores K and V in the paged cache against the rotary kernel followed by store_kv."""

import pytest
import torch

from model_optimizer.runtime.kernels.reference import FP8_DTYPE, KVStore
from model_optimizer.runtime.kernels.rotary import norm_rotate, norm_rotate_store
from model_optimizer.runtime.kernels.store_kv import store_kv
from model_optimizer.runtime.layers.rotary import RopeConfig, RotaryEmbedding, norm_rotate_ref


def _inputs(num_tokens, heads, kv_heads, head_dim, dtype, seed=0):
    """q and k as strided views into one fused qkv buffer, as the attention layer hands them over."""
    gen = torch.Generator().manual_seed(seed)
    qkv = (3 * torch.randn(num_tokens, (heads + 2 * kv_heads) * head_dim, generator=gen)).to(dtype)
    q, k, _ = qkv.split([heads * head_dim, kv_heads * head_dim, kv_heads * head_dim], dim=-1)
    positions = torch.randint(0, 200, (num_tokens,), generator=gen)
    weights = [(1 + 0.5 * torch.randn(head_dim, generator=gen)).to(dtype) for _ in range(2)]
    return q.view(num_tokens, heads, head_dim), k.view(num_tokens, kv_heads, head_dim), positions, weights


def _value(q, kv_heads):
    """V as the third strided view of the same qkv buffer."""
    qkv = q._base if q._base is not None else q
    num_tokens, head_dim = q.shape[0], q.shape[-1]
    return qkv[:, -kv_heads * head_dim :].view(num_tokens, kv_heads, head_dim)


@pytest.mark.parametrize(
    ("dtype", "heads", "kv_heads", "head_dim", "norm"),
    [
        (torch.float32, 4, 2, 64, True),
        (torch.bfloat16, 4, 2, 64, True),  # Qwen3: per-head RMSNorm first
        (torch.bfloat16, 3, 1, 32, False),  # Llama: rotation only; head counts not powers of two
        (torch.float16, 2, 2, 80, True),  # half a head (40) not a power of two
        (torch.bfloat16, 3, 3, 32, True),  # norm with head counts that are not powers of two
    ],
)
def test_norm_rotate_matches_reference(dtype, heads, kv_heads, head_dim, norm):
    rotary = RotaryEmbedding(RopeConfig(head_dim, 256, theta=10000.0))
    q, k, positions, (qw, kw) = _inputs(7, heads, kv_heads, head_dim, dtype)
    weights = (qw, kw) if norm else (None, None)
    want_q, want_k = norm_rotate_ref(q, k, positions, rotary.cos, rotary.sin, *weights, 1e-6)
    got_q, got_k = norm_rotate(q, k, positions, rotary.cos, rotary.sin, *weights, 1e-6)
    assert got_q.is_contiguous() and got_q.dtype == dtype and got_k.shape == k.shape
    # the reference rounds after every op in half precision, the kernel once at the end: a rounding step apart
    tol = dict(atol=1e-5, rtol=1e-5) if dtype == torch.float32 else dict(atol=3e-2, rtol=2e-2)
    torch.testing.assert_close(got_q, want_q, **tol)
    torch.testing.assert_close(got_k, want_k, **tol)


def test_norm_rotate_no_tokens_and_bad_shapes():
    rotary = RotaryEmbedding(RopeConfig(64, 16))
    q, k, positions, _ = _inputs(0, 2, 1, 64, torch.float32)
    out_q, out_k = norm_rotate(q, k, positions, rotary.cos, rotary.sin)
    assert out_q.shape == (0, 2, 64) and out_k.shape == (0, 1, 64)
    q, k, positions, _ = _inputs(3, 2, 1, 64, torch.float32)
    with pytest.raises(ValueError, match="must be \\(positions, 32\\)"):
        norm_rotate(q, k, positions, rotary.cos[:, :16], rotary.sin[:, :16])
    with pytest.raises(ValueError, match="one even head_dim"):
        norm_rotate(q, k[..., :32], positions, rotary.cos, rotary.sin)


def test_norm_rotate_reads_strided_positions_and_wants_both_weights():
    rotary = RotaryEmbedding(RopeConfig(32, 256))
    q, k, _, (qw, kw) = _inputs(5, 2, 1, 32, torch.float32)
    positions = (torch.arange(10) * 7)[::2]  # not contiguous
    want = norm_rotate_ref(q, k, positions, rotary.cos, rotary.sin, qw, kw)
    got = norm_rotate(q, k, positions, rotary.cos, rotary.sin, qw, kw)
    for a, b in zip(got, want):
        torch.testing.assert_close(a, b, atol=1e-5, rtol=1e-5)
    with pytest.raises(ValueError, match="come together"):
        norm_rotate(q, k, positions, rotary.cos, rotary.sin, qw, None)


def test_layers_find_this_kernel_through_triton_kernel():
    from model_optimizer.runtime.kernels import triton_kernel

    assert triton_kernel("rotary", "norm_rotate") is norm_rotate


def _bits(cache: torch.Tensor) -> torch.Tensor:
    return cache.view(torch.uint8) if cache.dtype == FP8_DTYPE else cache


@pytest.mark.parametrize("cache_dtype", [torch.bfloat16, FP8_DTYPE])
@pytest.mark.parametrize("norm", [True, False])
@pytest.mark.parametrize(("heads", "kv_heads", "head_dim", "block_size"), [(4, 2, 64, 4), (3, 3, 32, 16)])
def test_norm_rotate_store_writes_what_rotate_then_store_kv_write(
    cache_dtype, norm, heads, kv_heads, head_dim, block_size
):
    """One launch, the same bits as two: q as norm_rotate returns it, the cache as store_kv leaves it after
    norm_rotate's k (fp8 with scales, slots of -1 skipped, every other slot untouched)."""
    rotary = RotaryEmbedding(RopeConfig(head_dim, 256))
    q, k, positions, (qw, kw) = _inputs(9, heads, kv_heads, head_dim, torch.bfloat16, seed=3)
    v = _value(q, kv_heads)
    weights = (qw, kw) if norm else (None, None)
    cache = (4 * torch.randn(2, 5, block_size, kv_heads, head_dim)).to(cache_dtype)  # poison: random, not zeros
    total = 5 * block_size
    slots = torch.tensor([3, -1, total - 1, block_size, 0, -1, 2 * block_size + 1, total - 2, 7])
    scales = (torch.tensor(0.5), torch.tensor(2.0)) if cache_dtype == FP8_DTYPE else (None, None)
    expected, actual = cache.clone(), cache.clone()
    want_q, want_k = norm_rotate(q, k, positions, rotary.cos, rotary.sin, *weights)
    store_kv(want_k, v, expected, slots, *scales)
    got_q = norm_rotate_store(q, k, positions, rotary.cos, rotary.sin, KVStore(v, actual, slots, *scales), *weights)
    assert torch.equal(got_q, want_q)
    assert torch.equal(_bits(actual), _bits(expected))
    written = actual.view(2, total, kv_heads, head_dim)
    assert torch.equal(_bits(written[:, 1]), _bits(cache.view(2, total, kv_heads, head_dim)[:, 1]))  # no token's slot
    if cache_dtype == torch.bfloat16:  # against the torch reference: a rounding step apart, as norm_rotate is
        ref_q, ref_k = norm_rotate_ref(q, k, positions, rotary.cos, rotary.sin, *weights)
        reference = cache.clone()
        KVStore(v, reference, slots).store_ref(ref_k)
        torch.testing.assert_close(got_q, ref_q, atol=3e-2, rtol=2e-2)
        torch.testing.assert_close(actual, reference, atol=3e-2, rtol=2e-2)
        assert torch.equal(written[1, 3], v[0])  # values are stored as they are


def test_norm_rotate_store_no_tokens_int32_slots_and_bad_shapes():
    rotary = RotaryEmbedding(RopeConfig(32, 256))
    q, k, positions, _ = _inputs(0, 2, 1, 32, torch.float32)
    cache = torch.zeros(2, 2, 4, 1, 32)
    out = norm_rotate_store(q, k, positions, rotary.cos, rotary.sin, KVStore(_value(q, 1), cache, positions))
    assert out.shape == (0, 2, 32) and not cache.any()
    q, k, positions, _ = _inputs(3, 2, 1, 32, torch.float32)
    v, slots = _value(q, 1), torch.tensor([5, -1, 0], dtype=torch.int32)
    norm_rotate_store(q, k, positions, rotary.cos, rotary.sin, KVStore(v, cache, slots))
    _, want_k = norm_rotate(q, k, positions, rotary.cos, rotary.sin)
    assert torch.equal(cache[0, 1, 1], want_k[0]) and torch.equal(cache[1, 0, 0], v[2])
    with pytest.raises(ValueError, match="slot_mapping"):
        norm_rotate_store(q, k, positions, rotary.cos, rotary.sin, KVStore(v, cache, slots[:2]))
    with pytest.raises(ValueError, match="to match the cache"):
        norm_rotate_store(q, k, positions, rotary.cos, rotary.sin, KVStore(v, torch.zeros(2, 2, 4, 2, 32), slots))
    with pytest.raises(ValueError, match="come together"):
        norm_rotate_store(q, k, positions, rotary.cos, rotary.sin, KVStore(v, cache, slots), torch.ones(32))


def test_attention_finds_the_storing_kernel_through_triton_kernel():
    from model_optimizer.runtime.kernels import triton_kernel

    assert triton_kernel("rotary", "norm_rotate_store") is norm_rotate_store
