"""Triton kernels: rotary position embedding of q and k, after Qwen3's per-head RMSNorm when asked.

Same contract as `layers.rotary.norm_rotate_ref`: q (tokens, heads, head_dim) and k (tokens, kv_heads,
head_dim), rows may be strided (views of the fused qkv projection), rotated by the cos/sin table rows
of their positions; new contiguous tensors come back. One program per token does all its q and k
heads, reading each element once and writing it once.

`norm_rotate_store` is the decoder's variant: the same program also writes the rotated K and the token's
V into the paged KV cache, exactly as `store_kv` would (kernels/store_kv.py, sharing its conversion to
the cache dtype), so a decoder layer launches one kernel for rotary and the KV store instead of two.
Paged attention reads keys from the cache only, so this variant returns q alone.

Why not torch.compile: the compiled version's speed depended on the token count it was first
compiled with. First compiled on a short input, inductor folded the per-head mean of squares into
the element-wise kernel, recomputing it per element, and that one kernel took a large share of an
embedding call's GPU time. This kernel reads and writes each element once (its time against
the compiled one: benchmarks/fused_ops.py, README "Embeddings" > "Benchmark").
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from model_optimizer.runtime.kernels import pdl
from model_optimizer.runtime.kernels.reference import KVStore
from model_optimizer.runtime.kernels.store_kv import _cache_values, check_store, scale_args


@triton.jit
def _cos_sin(positions_ptr, cos_ptr, sin_ptr, q_ptr, token, stride_table, HALF: tl.constexpr, HALF_PAD: tl.constexpr):
    """The token's cos and sin rows (1, HALF_PAD), rounded to the model dtype as the reference rounds the
    float32 table before multiplying."""
    position = tl.load(positions_ptr + token).to(tl.int64)
    dims = tl.arange(0, HALF_PAD)
    dtype = q_ptr.dtype.element_ty
    cos = tl.load(cos_ptr + position * stride_table + dims, mask=dims < HALF, other=0.0)
    sin = tl.load(sin_ptr + position * stride_table + dims, mask=dims < HALF, other=0.0)
    return cos.to(dtype).to(tl.float32)[None, :], sin.to(dtype).to(tl.float32)[None, :]


@triton.jit
def _rotate_heads(
    src_ptr,
    weight_ptr,
    token,
    stride_t,
    stride_h,
    cos,
    sin,
    eps,
    NUM_HEADS: tl.constexpr,
    HEADS_PAD: tl.constexpr,
    HALF: tl.constexpr,
    HALF_PAD: tl.constexpr,
    HAS_NORM: tl.constexpr,
):
    """(first halves, second halves, mask) of the token's heads, normalized when asked and rotated, in the
    model dtype: each (HEADS_PAD, HALF_PAD), the mask true on real heads and dimensions."""
    heads = tl.arange(0, HEADS_PAD)
    dims = tl.arange(0, HALF_PAD)
    mask = (heads[:, None] < NUM_HEADS) & (dims[None, :] < HALF)
    src = src_ptr + token * stride_t + heads[:, None] * stride_h + dims[None, :]
    x1 = tl.load(src, mask=mask, other=0.0).to(tl.float32)  # (HEADS_PAD, HALF_PAD): first halves
    x2 = tl.load(src + HALF, mask=mask, other=0.0).to(tl.float32)
    dtype = src_ptr.dtype.element_ty
    if HAS_NORM:
        # as the reference: float32 statistics, normalized value rounded to the model dtype, then the weight
        mean_square = (tl.sum(x1 * x1, axis=1) + tl.sum(x2 * x2, axis=1)) / (2 * HALF)
        inv = tl.rsqrt(mean_square + eps)[:, None]
        w1 = tl.load(weight_ptr + dims, mask=dims < HALF, other=0.0).to(tl.float32)[None, :]
        w2 = tl.load(weight_ptr + HALF + dims, mask=dims < HALF, other=0.0).to(tl.float32)[None, :]
        x1 = (w1 * (x1 * inv).to(dtype).to(tl.float32)).to(dtype).to(tl.float32)
        x2 = (w2 * (x2 * inv).to(dtype).to(tl.float32)).to(dtype).to(tl.float32)
    return (x1 * cos - x2 * sin).to(dtype), (x2 * cos + x1 * sin).to(dtype), mask


@triton.jit
def _store_halves(row_ptr, stride_h, x1, x2, mask, HEADS_PAD: tl.constexpr, HALF: tl.constexpr, HALF_PAD: tl.constexpr):
    """Write the heads' halves at row_ptr, heads stride_h apart (a contiguous output row or a cache slot)."""
    heads = tl.arange(0, HEADS_PAD)
    dims = tl.arange(0, HALF_PAD)
    dst = row_ptr + heads[:, None] * stride_h + dims[None, :]
    tl.store(dst, x1, mask=mask)
    tl.store(dst + HALF, x2, mask=mask)


@triton.jit
def _rotate_q_and_k(
    q_ptr, k_ptr, q_out_ptr, positions_ptr, cos_ptr, sin_ptr, q_weight_ptr, k_weight_ptr, eps, token, stride_qt,
    stride_qh, stride_kt, stride_kh, stride_table, NUM_Q_HEADS: tl.constexpr, Q_HEADS_PAD: tl.constexpr,
    NUM_K_HEADS: tl.constexpr, K_HEADS_PAD: tl.constexpr, HALF: tl.constexpr, HALF_PAD: tl.constexpr,
    HAS_NORM: tl.constexpr,
):  # fmt: skip
    """What both kernels do first for their token: q rotated (normalized when asked) and written to its
    contiguous output row; k rotated likewise and returned as (first halves, second halves, mask), for the
    caller to write where it keeps keys (an output row, or the paged cache)."""
    cos, sin = _cos_sin(positions_ptr, cos_ptr, sin_ptr, q_ptr, token, stride_table, HALF, HALF_PAD)
    q1, q2, q_mask = _rotate_heads(
        q_ptr, q_weight_ptr, token, stride_qt, stride_qh, cos, sin, eps, NUM_Q_HEADS, Q_HEADS_PAD, HALF, HALF_PAD,
        HAS_NORM,
    )  # fmt: skip
    _store_halves(q_out_ptr + token * (NUM_Q_HEADS * 2 * HALF), 2 * HALF, q1, q2, q_mask, Q_HEADS_PAD, HALF, HALF_PAD)
    return _rotate_heads(
        k_ptr, k_weight_ptr, token, stride_kt, stride_kh, cos, sin, eps, NUM_K_HEADS, K_HEADS_PAD, HALF, HALF_PAD,
        HAS_NORM,
    )  # fmt: skip


@triton.jit
def _norm_rotate_kernel(
    q_ptr,
    k_ptr,
    q_out_ptr,
    k_out_ptr,
    positions_ptr,
    cos_ptr,
    sin_ptr,
    q_weight_ptr,
    k_weight_ptr,
    eps,
    stride_qt,
    stride_qh,
    stride_kt,
    stride_kh,
    stride_table,
    NUM_Q_HEADS: tl.constexpr,
    Q_HEADS_PAD: tl.constexpr,
    NUM_K_HEADS: tl.constexpr,
    K_HEADS_PAD: tl.constexpr,
    HALF: tl.constexpr,
    HALF_PAD: tl.constexpr,
    HAS_NORM: tl.constexpr,
):
    token = tl.program_id(0).to(tl.int64)  # token * row stride passes 2**31 at a few hundred thousand tokens
    k1, k2, k_mask = _rotate_q_and_k(
        q_ptr, k_ptr, q_out_ptr, positions_ptr, cos_ptr, sin_ptr, q_weight_ptr, k_weight_ptr, eps, token, stride_qt,
        stride_qh, stride_kt, stride_kh, stride_table, NUM_Q_HEADS, Q_HEADS_PAD, NUM_K_HEADS, K_HEADS_PAD, HALF,
        HALF_PAD, HAS_NORM,
    )  # fmt: skip
    _store_halves(k_out_ptr + token * (NUM_K_HEADS * 2 * HALF), 2 * HALF, k1, k2, k_mask, K_HEADS_PAD, HALF, HALF_PAD)


@triton.jit
def _norm_rotate_store_kernel(
    q_ptr,
    k_ptr,
    v_ptr,
    q_out_ptr,
    cache_ptr,
    slot_ptr,
    positions_ptr,
    cos_ptr,
    sin_ptr,
    q_weight_ptr,
    k_weight_ptr,
    k_scale_ptr,
    v_scale_ptr,
    eps,
    stride_qt,
    stride_qh,
    stride_kt,
    stride_kh,
    stride_vt,
    stride_vh,
    stride_table,
    stride_plane,
    stride_block,
    stride_offset,
    stride_head,
    NUM_Q_HEADS: tl.constexpr,
    Q_HEADS_PAD: tl.constexpr,
    NUM_K_HEADS: tl.constexpr,
    K_HEADS_PAD: tl.constexpr,
    HALF: tl.constexpr,
    HALF_PAD: tl.constexpr,
    HAS_NORM: tl.constexpr,
    BLOCK_SIZE: tl.constexpr,
    QUANTIZE: tl.constexpr,
    HAS_SCALES: tl.constexpr,
    PDL: tl.constexpr = False,
):
    pdl.wait_then_release(PDL)
    token = tl.program_id(0).to(tl.int64)  # token * row stride passes 2**31 at a few hundred thousand tokens
    k1, k2, k_mask = _rotate_q_and_k(
        q_ptr, k_ptr, q_out_ptr, positions_ptr, cos_ptr, sin_ptr, q_weight_ptr, k_weight_ptr, eps, token, stride_qt,
        stride_qh, stride_kt, stride_kh, stride_table, NUM_Q_HEADS, Q_HEADS_PAD, NUM_K_HEADS, K_HEADS_PAD, HALF,
        HALF_PAD, HAS_NORM,
    )  # fmt: skip
    # K and V of a padding token (slot -1) are not stored; the slot broadcast to a tensor for the interpreter
    slot = tl.load(slot_ptr + token).to(tl.int64)
    heads = tl.arange(0, K_HEADS_PAD)
    stored = k_mask & ((heads[:, None] * 0 + slot) >= 0)
    row = cache_ptr + (slot // BLOCK_SIZE) * stride_block + (slot % BLOCK_SIZE) * stride_offset
    k1 = _cache_values(k1, cache_ptr, k_scale_ptr, QUANTIZE, HAS_SCALES)
    k2 = _cache_values(k2, cache_ptr, k_scale_ptr, QUANTIZE, HAS_SCALES)
    _store_halves(row, stride_head, k1, k2, stored, K_HEADS_PAD, HALF, HALF_PAD)
    v = v_ptr + token * stride_vt + heads[:, None] * stride_vh + tl.arange(0, HALF_PAD)[None, :]
    v1 = _cache_values(tl.load(v, mask=stored), cache_ptr, v_scale_ptr, QUANTIZE, HAS_SCALES)
    v2 = _cache_values(tl.load(v + HALF, mask=stored), cache_ptr, v_scale_ptr, QUANTIZE, HAS_SCALES)
    _store_halves(row + stride_plane, stride_head, v1, v2, stored, K_HEADS_PAD, HALF, HALF_PAD)


def norm_rotate(
    q: torch.Tensor,
    k: torch.Tensor,
    positions: torch.Tensor,
    cos: torch.Tensor,
    sin: torch.Tensor,
    q_weight: torch.Tensor | None = None,
    k_weight: torch.Tensor | None = None,
    eps: float = 1e-6,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Rotated (and, with weights, first RMS-normalized) copies of q and k; see the module docstring."""
    positions = _check(q, k, positions, cos, sin, q_weight, k_weight)
    q_out, k_out = (
        torch.empty(q.shape, dtype=q.dtype, device=q.device),
        torch.empty(k.shape, dtype=k.dtype, device=k.device),
    )
    if q.shape[0] == 0:
        return q_out, k_out
    has_norm = q_weight is not None
    _norm_rotate_kernel[(q.shape[0],)](
        q,
        k,
        q_out,
        k_out,
        positions,
        cos,
        sin,
        q_weight if has_norm else q,
        k_weight if has_norm else k,
        eps,
        q.stride(0),
        q.stride(1),
        k.stride(0),
        k.stride(1),
        cos.stride(0),
        **_shape_constexprs(q, k, has_norm),
    )
    return q_out, k_out


def norm_rotate_store(
    q: torch.Tensor,
    k: torch.Tensor,
    positions: torch.Tensor,
    cos: torch.Tensor,
    sin: torch.Tensor,
    store: KVStore,
    q_weight: torch.Tensor | None = None,
    k_weight: torch.Tensor | None = None,
    eps: float = 1e-6,
) -> torch.Tensor:
    """`norm_rotate`'s q; its k and `store.value` written into `store.kv_cache` as `store_kv` writes them,
    in the same launch (reference: norm_rotate_ref, then store_kv_ref of its k)."""
    positions = _check(q, k, positions, cos, sin, q_weight, k_weight)
    value, cache, slots = store.value, store.kv_cache, store.slot_mapping
    check_store(k, value, cache, slots)
    q_out = torch.empty(q.shape, dtype=q.dtype, device=q.device)
    if q.shape[0] == 0:
        return q_out
    quantize, has_scales, k_scale, v_scale = scale_args(cache, slots, store.k_scale, store.v_scale)
    has_norm = q_weight is not None
    _norm_rotate_store_kernel[(q.shape[0],)](
        q,
        k,
        value,
        q_out,
        cache,
        slots,
        positions,
        cos,
        sin,
        q_weight if has_norm else q,
        k_weight if has_norm else k,
        k_scale,
        v_scale,
        eps,
        q.stride(0),
        q.stride(1),
        k.stride(0),
        k.stride(1),
        value.stride(0),
        value.stride(1),
        cos.stride(0),
        cache.stride(0),
        cache.stride(1),
        cache.stride(2),
        cache.stride(3),
        **_shape_constexprs(q, k, has_norm),
        BLOCK_SIZE=cache.shape[2],
        QUANTIZE=quantize,
        HAS_SCALES=has_scales,
        **pdl.options(q_out),
    )
    return q_out


def _check(q, k, positions, cos, sin, q_weight, k_weight) -> torch.Tensor:
    """Validate the rotation's inputs; positions come back contiguous (read as one index per token;
    positions past the table are the caller's to prevent)."""
    head_dim = q.shape[-1]
    if q.dim() != 3 or k.dim() != 3 or k.shape[-1] != head_dim or k.shape[0] != q.shape[0] or head_dim % 2:
        raise ValueError(
            f"q {tuple(q.shape)} and k {tuple(k.shape)} must be (tokens, heads, head_dim) with one even head_dim"
        )
    if q.stride(-1) != 1 or k.stride(-1) != 1 or cos.stride(-1) != 1 or sin.stride() != cos.stride():
        raise ValueError("q, k and the cos/sin tables must be contiguous in their last dimension")
    if cos.shape[-1] * 2 != head_dim or positions.shape != (q.shape[0],):
        raise ValueError(f"cos/sin must be (positions, {head_dim // 2}) and positions ({q.shape[0]},)")
    if (q_weight is None) != (k_weight is None):
        raise ValueError("q_weight and k_weight come together (Qwen3's q_norm and k_norm) or not at all")
    return positions.contiguous()


def _shape_constexprs(q: torch.Tensor, k: torch.Tensor, has_norm: bool) -> dict:
    half = q.shape[-1] // 2
    return dict(
        NUM_Q_HEADS=q.shape[1],
        Q_HEADS_PAD=triton.next_power_of_2(q.shape[1]),
        NUM_K_HEADS=k.shape[1],
        K_HEADS_PAD=triton.next_power_of_2(k.shape[1]),
        HALF=half,
        HALF_PAD=triton.next_power_of_2(half),
        HAS_NORM=has_norm,
    )
