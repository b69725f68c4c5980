"""Triton kernel: rotary position embedding of q and k, after Qwen3's per-head RMSNorm when asked.

Same contract as `layers.rotary.norm_rotate_ref`: q (tokens, heads, head_dim) and k (tokens, kv_heads,
head_dim), rows may be strided (views of the fused qkv projection), rotated by the cos/sin table rows
of their positions; new contiguous tensors come back. One program per token does all its q and k
heads, reading each element once and writing it once.

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


@triton.jit
def _rotate_heads(
    src_ptr,
    dst_ptr,
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
    heads = tl.arange(0, HEADS_PAD)
    dims = tl.arange(0, HALF_PAD)
    mask = (heads[:, None] < NUM_HEADS) & (dims[None, :] < HALF)
    src = src_ptr + token * stride_t + heads[:, None] * stride_h + dims[None, :]
    x1 = tl.load(src, mask=mask, other=0.0).to(tl.float32)  # (HEADS_PAD, HALF_PAD): first halves
    x2 = tl.load(src + HALF, mask=mask, other=0.0).to(tl.float32)
    dtype = dst_ptr.dtype.element_ty
    if HAS_NORM:
        # as the reference: float32 statistics, normalized value rounded to the model dtype, then the weight
        mean_square = (tl.sum(x1 * x1, axis=1) + tl.sum(x2 * x2, axis=1)) / (2 * HALF)
        inv = tl.rsqrt(mean_square + eps)[:, None]
        w1 = tl.load(weight_ptr + dims, mask=dims < HALF, other=0.0).to(tl.float32)[None, :]
        w2 = tl.load(weight_ptr + HALF + dims, mask=dims < HALF, other=0.0).to(tl.float32)[None, :]
        x1 = (w1 * (x1 * inv).to(dtype).to(tl.float32)).to(dtype).to(tl.float32)
        x2 = (w2 * (x2 * inv).to(dtype).to(tl.float32)).to(dtype).to(tl.float32)
    dst = dst_ptr + token * (NUM_HEADS * 2 * HALF) + heads[:, None] * (2 * HALF) + dims[None, :]
    tl.store(dst, (x1 * cos - x2 * sin).to(dtype), mask=mask)
    tl.store(dst + HALF, (x2 * cos + x1 * sin).to(dtype), mask=mask)


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
    position = tl.load(positions_ptr + token).to(tl.int64)
    dims = tl.arange(0, HALF_PAD)
    dtype = q_out_ptr.dtype.element_ty
    # the table is float32; the reference rounds it to the model dtype before multiplying
    cos = (
        tl.load(cos_ptr + position * stride_table + dims, mask=dims < HALF, other=0.0).to(dtype).to(tl.float32)[None, :]
    )
    sin = (
        tl.load(sin_ptr + position * stride_table + dims, mask=dims < HALF, other=0.0).to(dtype).to(tl.float32)[None, :]
    )
    _rotate_heads(
        q_ptr,
        q_out_ptr,
        q_weight_ptr,
        token,
        stride_qt,
        stride_qh,
        cos,
        sin,
        eps,
        NUM_Q_HEADS,
        Q_HEADS_PAD,
        HALF,
        HALF_PAD,
        HAS_NORM,
    )
    _rotate_heads(
        k_ptr,
        k_out_ptr,
        k_weight_ptr,
        token,
        stride_kt,
        stride_kh,
        cos,
        sin,
        eps,
        NUM_K_HEADS,
        K_HEADS_PAD,
        HALF,
        HALF_PAD,
        HAS_NORM,
    )


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
    has_norm = q_weight is not None
    positions = (
        positions.contiguous()
    )  # read as one index per token; positions past the table are the caller's to prevent
    q_out, k_out = (
        torch.empty(q.shape, dtype=q.dtype, device=q.device),
        torch.empty(k.shape, dtype=k.dtype, device=k.device),
    )
    if q.shape[0] == 0:
        return q_out, k_out
    half = head_dim // 2
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
        NUM_Q_HEADS=q.shape[1],
        Q_HEADS_PAD=triton.next_power_of_2(q.shape[1]),
        NUM_K_HEADS=k.shape[1],
        K_HEADS_PAD=triton.next_power_of_2(k.shape[1]),
        HALF=half,
        HALF_PAD=triton.next_power_of_2(half),
        HAS_NORM=has_norm,
    )
    return q_out, k_out
