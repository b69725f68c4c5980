"""Triton qk-norm + rotary against the torch reference, through the Triton interpreter on the CPU."""

import pytest
import torch

from model_optimizer.runtime.kernels.rotary import norm_rotate
from model_optimizer.runtime.layers.rotary import RopeConfig, RotaryEmbedding, norm_rotate_ref


def _inputs(num_tokens, heads, kv_heads, head_dim, dtype, seed=0):
    """q and k as strided views into one fused qkv buffer, as the attention layer hands them over."""
    gen = torch.Generator().manual_seed(seed)
    qkv = (3 * torch.randn(num_tokens, (heads + 2 * kv_heads) * head_dim, generator=gen)).to(dtype)
    q, k, _ = qkv.split([heads * head_dim, kv_heads * head_dim, kv_heads * head_dim], dim=-1)
    positions = torch.randint(0, 200, (num_tokens,), generator=gen)
    weights = [(1 + 0.5 * torch.randn(head_dim, generator=gen)).to(dtype) for _ in range(2)]
    return q.view(num_tokens, heads, head_dim), k.view(num_tokens, kv_heads, head_dim), positions, weights


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
