"""Triton kernel that scatters new keys and values into their paged-cache slots.

Same contract as `reference.store_kv_ref`: one program per token writes all its KV heads;
a slot of -1 (padding of a CUDA-graph batch) writes nothing. For an fp8 cache the values are
divided by the per-tensor scale, clamped to +-448 and rounded to e4m3.
No host synchronisation, so it can be captured in a CUDA graph.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from model_optimizer.runtime.kernels.formats import FP8_DTYPE, FP8_MAX

_FP8_MAX = tl.constexpr(FP8_MAX)  # jit functions may only read constexpr globals


@triton.jit
def _store_kv_kernel(
    key_ptr,
    value_ptr,
    cache_ptr,
    slot_ptr,
    k_scale_ptr,
    v_scale_ptr,
    stride_kt,
    stride_kh,
    stride_vt,
    stride_vh,
    stride_plane,
    stride_block,
    stride_offset,
    stride_head,
    NUM_KV_HEADS: tl.constexpr,
    HEADS_PAD: tl.constexpr,
    HEAD_DIM: tl.constexpr,
    HEAD_DIM_PAD: tl.constexpr,
    BLOCK_SIZE: tl.constexpr,
    QUANTIZE: tl.constexpr,
    HAS_SCALES: tl.constexpr,
):
    token = tl.program_id(0)
    slot = tl.load(slot_ptr + token).to(tl.int64)
    heads = tl.arange(0, HEADS_PAD)
    dims = tl.arange(0, HEAD_DIM_PAD)
    # slot broadcast to a tensor: a scalar in the mask trips the interpreter
    mask = (heads[:, None] < NUM_KV_HEADS) & (dims[None, :] < HEAD_DIM) & ((heads[:, None] * 0 + slot) >= 0)
    key = tl.load(key_ptr + token * stride_kt + heads[:, None] * stride_kh + dims[None, :], mask=mask)
    value = tl.load(value_ptr + token * stride_vt + heads[:, None] * stride_vh + dims[None, :], mask=mask)
    block = slot // BLOCK_SIZE
    offset = slot % BLOCK_SIZE
    dst = cache_ptr + block * stride_block + offset * stride_offset + heads[:, None] * stride_head + dims[None, :]
    tl.store(dst, _cache_values(key, cache_ptr, k_scale_ptr, QUANTIZE, HAS_SCALES), mask=mask)
    tl.store(dst + stride_plane, _cache_values(value, cache_ptr, v_scale_ptr, QUANTIZE, HAS_SCALES), mask=mask)


@triton.jit
def _cache_values(x, cache_ptr, scale_ptr, QUANTIZE: tl.constexpr, HAS_SCALES: tl.constexpr):
    """x as the cache holds it: cast to its dtype, or for fp8 divided by the scale, saturated and rounded.
    Shared with the rotary kernel that stores K and V itself (rotary.py), so both write the same bits."""
    if QUANTIZE:
        x = x.to(tl.float32)
        if HAS_SCALES:
            # IEEE division, as torch does: the default GPU division is approximate and could
            # move a value across an e4m3 rounding boundary
            x = tl.div_rn(x, tl.load(scale_ptr))
        x = tl.minimum(tl.maximum(x, -_FP8_MAX), _FP8_MAX)  # e4m3 has no inf: saturate
    return x.to(cache_ptr.dtype.element_ty)


def store_kv(
    key: torch.Tensor,
    value: torch.Tensor,
    kv_cache: torch.Tensor,
    slot_mapping: torch.Tensor,
    k_scale: torch.Tensor | None = None,
    v_scale: torch.Tensor | None = None,
) -> None:
    """Write key/value (num_tokens, num_kv_heads, head_dim) into kv_cache at slot_mapping (-1: skip)."""
    check_store(key, value, kv_cache, slot_mapping)
    num_tokens = key.shape[0]
    if num_tokens == 0:
        return
    quantize, has_scales, k_scale, v_scale = scale_args(kv_cache, slot_mapping, k_scale, v_scale)
    num_kv_heads, head_dim = kv_cache.shape[3], kv_cache.shape[4]
    _store_kv_kernel[(num_tokens,)](
        key,
        value,
        kv_cache,
        slot_mapping,
        k_scale,
        v_scale,
        key.stride(0),
        key.stride(1),
        value.stride(0),
        value.stride(1),
        kv_cache.stride(0),
        kv_cache.stride(1),
        kv_cache.stride(2),
        kv_cache.stride(3),
        NUM_KV_HEADS=num_kv_heads,
        HEADS_PAD=triton.next_power_of_2(num_kv_heads),
        HEAD_DIM=head_dim,
        HEAD_DIM_PAD=triton.next_power_of_2(head_dim),
        BLOCK_SIZE=kv_cache.shape[2],
        QUANTIZE=quantize,
        HAS_SCALES=has_scales,
    )


def check_store(key: torch.Tensor, value: torch.Tensor, kv_cache: torch.Tensor, slot_mapping: torch.Tensor) -> None:
    """The shapes a store into the paged cache needs (also the rotary kernel's that stores, rotary.py)."""
    if kv_cache.dim() != 5 or kv_cache.shape[0] != 2:
        raise ValueError(
            f"kv_cache must be (2, num_blocks, block_size, kv_heads, head_dim), got {tuple(kv_cache.shape)}"
        )
    if key.shape != value.shape or key.shape[1:] != kv_cache.shape[3:]:
        raise ValueError(
            f"key {tuple(key.shape)} and value {tuple(value.shape)} must both be "
            f"(num_tokens, {kv_cache.shape[3]}, {kv_cache.shape[4]}) to match the cache"
        )
    if slot_mapping.shape != (key.shape[0],):
        raise ValueError(f"slot_mapping must be ({key.shape[0]},), got {tuple(slot_mapping.shape)}")
    if key.stride(2) != 1 or value.stride(2) != 1 or kv_cache.stride(4) != 1:
        raise ValueError("key, value and kv_cache must be contiguous in head_dim")


def scale_args(
    kv_cache: torch.Tensor, slot_mapping: torch.Tensor, k_scale: torch.Tensor | None, v_scale: torch.Tensor | None
) -> tuple[bool, bool, torch.Tensor, torch.Tensor]:
    """(QUANTIZE, HAS_SCALES, k_scale, v_scale) for a kernel that calls `_cache_values`: scales are read
    only for an fp8 cache, and stand-in pointers (never read) replace absent ones."""
    quantize = kv_cache.dtype == FP8_DTYPE
    has_scales = quantize and k_scale is not None and v_scale is not None
    if not has_scales:
        k_scale = v_scale = slot_mapping
    return quantize, has_scales, k_scale, v_scale
