"""Multi-head latent attention on the GPU: the absorbed form over the paged latent cache, one Triton kernel.

Same inputs and result as `mla_reference.latent_attention_ref`: queries (tokens, heads, kv_lora_rank +
qk_rope_head_dim) already absorbed ([q_nope W_UK | q_pe]), the cache of latent rows (1, blocks,
block_size, 1, kv_lora_rank + qk_rope_head_dim), and per head the softmax-weighted sum of the
compressed KVs back, (tokens, heads, kv_lora_rank). It is multi-query attention whose one key head is
the whole row and whose value is the row's first kv_lora_rank values: a key tile is loaded once and
serves as keys and values for BLOCK_H heads of BLOCK_Q query tokens (rows token-major, head-minor).

Grid (query tiles, head blocks, splits). Decode tokens get one tile each (BLOCK_Q = 1; rows are the
heads, padded to the 16 rows tl.dot needs); a decode-only batch (max_query_len 1) maps program i to
sequence i. Prefill chunks take several tokens per tile, numbered as in paged_attention_kernels.py
(sequence i owns tiles from query_start_loc[i] // BLOCK_Q + i, found by binary search), so the grid
depends on shapes alone and the kernel can be captured in a CUDA graph. Scores are the sum of two
dots, latent part and rope part (each padded to a power of two), softmax online in float32, base 2.
With NUM_SPLITS > 1 each program covers a slice of the keys and `_reduce_splits_kernel` of the full-head
attention merges the partials (same layout: tokens x heads x splits rows of KV_LORA_PAD values).

fp8 cache: rows are read back times k_scale (keys and values are the same row, one scale).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import triton
import triton.language as tl

from model_optimizer.runtime.kernels.dots import dot
from model_optimizer.runtime.kernels.formats import FP8_DTYPE
from model_optimizer.runtime.kernels.paged_attention import _dot_dtype, _num_sms, choose_num_splits
from model_optimizer.runtime.kernels.paged_attention_kernels import _find_sequence, _reduce_splits_kernel

_LOG2E = tl.constexpr(1.4426950408889634)
_NEG_BIG = tl.constexpr(-1.0e30)
MIN_ROWS = 16  # tl.dot needs 16 rows: few heads are padded with masked ones


@dataclass(frozen=True)
class MlaTiles:
    """Launch shape: what a benchmark may sweep."""

    block_h: int = 16
    """Heads per program at decode (a power of two, at least 16: padded heads are masked)."""
    prefill_rows: int = 32
    """Rows (tokens x heads) per program of a prefill tile."""
    tile_n: int = 32
    """Cached tokens per inner-loop step."""
    num_warps: int = 4
    num_stages: int = 2


@triton.jit(do_not_specialize=["num_seqs", "stride_bt"])
def _latent_attention_kernel(
    out_ptr, part_acc_ptr, part_max_ptr, part_sum_ptr, q_ptr, cache_ptr, qsl_ptr, seq_lens_ptr, block_tables_ptr,
    k_scale_ptr, scale, num_seqs, num_heads, stride_qt, stride_qh, stride_ot, stride_oh, stride_block,
    stride_offset, stride_bt,
    KV_LORA: tl.constexpr, KV_LORA_PAD: tl.constexpr, ROPE: tl.constexpr, ROPE_PAD: tl.constexpr,
    BLOCK_H: tl.constexpr, BLOCK_Q: tl.constexpr, BLOCK_SIZE: tl.constexpr, TILE_N: tl.constexpr,
    NUM_SPLITS: tl.constexpr, HAS_SCALE: tl.constexpr, DOT_DTYPE: tl.constexpr, DECODE_ONLY: tl.constexpr,
):  # fmt: skip
    tile, head_block, split = tl.program_id(0), tl.program_id(1), tl.program_id(2)
    if DECODE_ONLY:  # at most one new token per sequence: program i serves sequence i
        seq = tile
        t0 = tl.zeros([], dtype=tl.int32)
    else:
        seq = _find_sequence(tile, qsl_ptr, num_seqs, BLOCK_Q)
        first_tile = tl.load(qsl_ptr + seq) // BLOCK_Q
        if BLOCK_Q > 1:
            first_tile += seq
        t0 = (tile - first_tile) * BLOCK_Q
    q_start = tl.load(qsl_ptr + seq)
    q_len = tl.load(qsl_ptr + seq + 1) - q_start
    if t0 >= q_len:
        return
    num_cached = tl.load(seq_lens_ptr + seq) - q_len

    BLOCK_M: tl.constexpr = BLOCK_Q * BLOCK_H
    rows = tl.arange(0, BLOCK_M)
    tok = t0 + rows // BLOCK_H  # token within the sequence's new tokens
    head = head_block * BLOCK_H + rows % BLOCK_H
    row_ok = (tok < q_len) & (head < num_heads)
    q_rows = (q_start + tok).to(tl.int64)
    lat, rope = tl.arange(0, KV_LORA_PAD), tl.arange(0, ROPE_PAD)
    lat_ok, rope_ok = lat < KV_LORA, rope < ROPE
    q_base = q_ptr + q_rows[:, None] * stride_qt + head[:, None] * stride_qh
    q_lat = tl.load(q_base + lat[None, :], mask=row_ok[:, None] & lat_ok[None, :], other=0.0).to(DOT_DTYPE)
    q_pe = tl.load(q_base + KV_LORA + rope[None, :], mask=row_ok[:, None] & rope_ok[None, :], other=0.0).to(DOT_DTYPE)
    q_pos = num_cached + tok

    kv_hi = num_cached + tl.minimum(t0 + BLOCK_Q, q_len)  # keys this tile can see: [kv_lo, kv_hi)
    kv_lo = tl.zeros([], dtype=tl.int32)
    if NUM_SPLITS > 1:
        part = tl.cdiv(tl.cdiv(kv_hi, NUM_SPLITS), TILE_N) * TILE_N
        kv_lo = split * part
        kv_hi = tl.minimum(kv_lo + part, kv_hi)
    qk_scale = scale * _LOG2E
    if HAS_SCALE:
        qk_scale = qk_scale * tl.load(k_scale_ptr)
    m_i = tl.zeros([BLOCK_M], dtype=tl.float32) + _NEG_BIG
    l_i = tl.zeros([BLOCK_M], dtype=tl.float32)
    acc = tl.zeros([BLOCK_M, KV_LORA_PAD], dtype=tl.float32)
    cols = tl.arange(0, TILE_N)
    table = block_tables_ptr + seq.to(tl.int64) * stride_bt
    for start in range(kv_lo, kv_hi, TILE_N):
        pos = start + cols
        pos_ok = pos < kv_hi
        block = tl.load(table + pos // BLOCK_SIZE, mask=pos_ok, other=0).to(tl.int64)
        row_ptr = cache_ptr + block * stride_block + (pos % BLOCK_SIZE) * stride_offset  # (TILE_N,)
        c = tl.load(row_ptr[:, None] + lat[None, :], mask=pos_ok[:, None] & lat_ok[None, :], other=0.0)
        k_pe = tl.load(row_ptr[:, None] + KV_LORA + rope[None, :], mask=pos_ok[:, None] & rope_ok[None, :], other=0.0)
        c = c.to(tl.float32).to(DOT_DTYPE)  # fp8 rows pass through float32
        s = dot(q_lat, tl.trans(c), None, DOT_DTYPE) + dot(
            q_pe, tl.trans(k_pe.to(tl.float32).to(DOT_DTYPE)), None, DOT_DTYPE
        )
        s = s * qk_scale  # (BLOCK_M, TILE_N), log2 units
        visible = (pos[None, :] <= q_pos[:, None]) & pos_ok[None, :]
        s = tl.where(visible, s, float("-inf"))
        if BLOCK_Q > 1:  # a later token's NaN/inf row must not reach earlier rows through 0 * NaN
            c_ok = tl.abs(c.to(tl.float32)) < float("inf")
            bad = tl.max(tl.where(c_ok, 0, 1), axis=1)  # (TILE_N,)
            s = tl.where(visible & (bad[None, :] > 0), float("nan"), s)
            c = tl.where(c_ok, c, tl.zeros_like(c))
        m_new = tl.maximum(m_i, tl.max(s, axis=1))
        p = tl.exp2(s - m_new[:, None])
        alpha = tl.exp2(m_i - m_new)
        l_i = l_i * alpha + tl.sum(p, axis=1)
        acc = acc * alpha[:, None] + dot(p.to(DOT_DTYPE), c, None, DOT_DTYPE)
        m_i = m_new
    if HAS_SCALE:
        acc = acc * tl.load(k_scale_ptr)

    out_mask = row_ok[:, None] & lat_ok[None, :]
    if NUM_SPLITS == 1:
        o = acc / tl.where(l_i > 0.0, l_i, 1.0)[:, None]
        out = out_ptr + q_rows[:, None] * stride_ot + head[:, None] * stride_oh + lat[None, :]
        tl.store(out, o.to(out_ptr.dtype.element_ty), mask=out_mask)
    else:
        part_row = (q_rows * num_heads + head) * NUM_SPLITS + split  # partials: (tokens, heads, splits)
        tl.store(part_max_ptr + part_row, m_i, mask=row_ok)
        tl.store(part_sum_ptr + part_row, l_i, mask=row_ok)
        tl.store(part_acc_ptr + part_row[:, None] * KV_LORA_PAD + lat[None, :], acc, mask=out_mask)


def _check(query: torch.Tensor, cache: torch.Tensor, qsl, seq_lens, block_tables, kv_lora_rank: int) -> None:
    if query.dim() != 3:
        raise ValueError(f"query must be (num_tokens, num_heads, latent_dim), got {tuple(query.shape)}")
    if cache.dim() != 5 or cache.shape[0] != 1 or cache.shape[3] != 1 or cache.shape[4] != query.shape[2]:
        raise ValueError(
            f"cache must be (1, num_blocks, block_size, 1, {query.shape[2]}) for this query, got {tuple(cache.shape)}"
        )
    if not 0 < kv_lora_rank < query.shape[2]:
        raise ValueError(f"kv_lora_rank must be in 1..{query.shape[2] - 1}, got {kv_lora_rank}")
    num_seqs = seq_lens.shape[0]
    if qsl.shape != (num_seqs + 1,) or block_tables.dim() != 2 or block_tables.shape[0] != num_seqs:
        raise ValueError(f"need query_start_loc ({num_seqs + 1},) and block_tables ({num_seqs}, max_blocks)")
    for name, tensor in (("query_start_loc", qsl), ("seq_lens", seq_lens), ("block_tables", block_tables)):
        if tensor.dtype != torch.int32:
            raise ValueError(f"{name} must be int32, got {tensor.dtype}")
    if query.stride(2) != 1 or cache.stride(4) != 1 or block_tables.stride(1) != 1:
        raise ValueError("query, cache and block_tables must be contiguous in their last dimension")
    if query.dtype not in (torch.float16, torch.bfloat16, torch.float32):
        raise ValueError(f"query dtype must be float16, bfloat16 or float32, got {query.dtype}")
    if cache.dtype not in (query.dtype, FP8_DTYPE):
        raise ValueError(f"cache dtype {cache.dtype} must match the query's {query.dtype} (or be fp8)")


def launch_shape(num_heads: int, max_query_len: int, tiles: MlaTiles) -> tuple[int, int]:
    """(BLOCK_H heads, BLOCK_Q tokens) per program: a decode token's heads in blocks of `tiles.block_h`
    (at least 16 rows, padded heads masked); prefill tiles of about `tiles.prefill_rows` rows."""
    if max_query_len == 1:
        return max(MIN_ROWS, triton.next_power_of_2(min(num_heads, tiles.block_h))), 1
    block_h = min(triton.next_power_of_2(num_heads), tiles.prefill_rows)
    block_q = min(tiles.prefill_rows // block_h, triton.next_power_of_2(max_query_len))
    return block_h, max(block_q, MIN_ROWS // block_h, 1)


def latent_attention(
    query: torch.Tensor,
    cache: torch.Tensor,
    query_start_loc: torch.Tensor,
    seq_lens: torch.Tensor,
    block_tables: torch.Tensor,
    scale: float,
    kv_lora_rank: int,
    *,
    max_query_len: int | None = None,
    max_seq_len: int | None = None,
    k_scale: torch.Tensor | None = None,
    num_splits: int | None = None,
    out: torch.Tensor | None = None,
    tiles: MlaTiles | None = None,
) -> torch.Tensor:
    """(num_tokens, heads, kv_lora_rank): arguments as `latent_attention_ref`; the hints as in
    `paged_attention` (max_query_len 1 promises a decode-only batch; num_splits None lets
    `choose_num_splits` decide); `out` a preallocated result; `tiles` the launch shape."""
    _check(query, cache, query_start_loc, seq_lens, block_tables, kv_lora_rank)
    num_tokens, num_heads, latent_dim = query.shape
    if out is None:
        out = torch.empty(num_tokens, num_heads, kv_lora_rank, dtype=query.dtype, device=query.device)
    elif out.shape != (num_tokens, num_heads, kv_lora_rank) or out.stride(2) != 1:
        raise ValueError(f"out must be ({num_tokens}, {num_heads}, {kv_lora_rank}), contiguous in its last dimension")
    num_seqs = seq_lens.shape[0]
    if num_tokens == 0 or num_seqs == 0:
        return out
    tiles = tiles or MlaTiles()
    max_query_len = num_tokens if max_query_len is None else max(1, min(max_query_len, num_tokens))
    decode_only = max_query_len == 1
    block_h, block_q = launch_shape(num_heads, max_query_len, tiles)
    head_blocks = triton.cdiv(num_heads, block_h)
    if num_splits is None:
        num_splits = choose_num_splits(num_seqs, head_blocks, max_query_len, max_seq_len, _num_sms(query.device.index))
    if num_splits < 1:
        raise ValueError(f"num_splits must be >= 1, got {num_splits}")
    kv_lora_pad = max(16, triton.next_power_of_2(kv_lora_rank))
    if num_splits > 1:
        part_acc = torch.empty(num_tokens, num_heads, num_splits, kv_lora_pad, dtype=torch.float32, device=query.device)
        part_max = torch.empty(num_tokens, num_heads, num_splits, dtype=torch.float32, device=query.device)
        part_sum = torch.empty_like(part_max)
    else:
        part_acc = part_max = part_sum = seq_lens  # unused pointers
    has_scale = cache.dtype == FP8_DTYPE and k_scale is not None
    num_tiles = num_seqs if decode_only else num_tokens // block_q + (num_seqs if block_q > 1 else 0)
    rope = latent_dim - kv_lora_rank
    _latent_attention_kernel[(num_tiles, head_blocks, num_splits)](
        out, part_acc, part_max, part_sum, query, cache, query_start_loc, seq_lens, block_tables,
        k_scale if has_scale else seq_lens, scale, num_seqs, num_heads, query.stride(0), query.stride(1),
        out.stride(0), out.stride(1), cache.stride(1), cache.stride(2), block_tables.stride(0),
        KV_LORA=kv_lora_rank, KV_LORA_PAD=kv_lora_pad, ROPE=rope, ROPE_PAD=max(16, triton.next_power_of_2(rope)),
        BLOCK_H=block_h, BLOCK_Q=block_q, BLOCK_SIZE=cache.shape[2], TILE_N=tiles.tile_n, NUM_SPLITS=num_splits,
        HAS_SCALE=has_scale, DOT_DTYPE=_dot_dtype(query.dtype), DECODE_ONLY=decode_only,
        num_warps=tiles.num_warps, num_stages=tiles.num_stages,
    )  # fmt: skip
    if num_splits > 1:
        _reduce_splits_kernel[(num_tokens, num_heads)](
            out, part_acc, part_max, part_sum, query_start_loc, num_seqs, num_heads, out.stride(0), out.stride(1),
            HEAD_DIM=kv_lora_rank, HEAD_DIM_PAD=kv_lora_pad, NUM_SPLITS=num_splits,
            SPLITS_PAD=triton.next_power_of_2(num_splits),
        )  # fmt: skip
    return out
