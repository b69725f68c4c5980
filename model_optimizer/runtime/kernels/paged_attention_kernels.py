"""Triton programs of the paged attention (the launcher lives in `paged_attention.py`).

`_paged_attention_kernel`: grid (query tiles, kv heads, splits). One program loads each K/V
tile of one sequence and one KV head once and uses it for a tile of BLOCK_Q query tokens times
all GROUP query heads that share that KV head (rows = token-major, head-minor). Decode tokens
get one tile each (BLOCK_Q = 1), prefill chunks several. Softmax is online, in fp32, base 2.

Query tiles are numbered without a host-side prefix sum: sequence i owns the tile ids
[query_start_loc[i] // BLOCK_Q + i, query_start_loc[i + 1] // BLOCK_Q + i + 1), a range at least
as long as its cdiv(q_len, BLOCK_Q) tiles, so the grid (num_tokens // BLOCK_Q + num_seqs) depends
on shapes only; a program finds its sequence by binary search and spare programs exit.
A decode-only batch (DECODE_ONLY, every sequence has at most one new token) skips the search:
grid num_seqs, program i serves sequence i.

With SOFTCAP > 0 (Gemma 2's attn_logit_softcapping) each scaled score s becomes SOFTCAP * tanh(s / SOFTCAP)
before the mask: the true score is capped, then taken to base-2 units, so the log2(e) factor is not folded
into the scale there. SOFTCAP 0.0 compiles the kernel every other model runs, unchanged.

With HAS_SINKS (gpt-oss's learned attention sinks) each query head h has one more logit, sinks[h], in its
softmax denominator and no value: the running max starts at the sink (in base-2 units) and the running sum
at exp2(0) = 1, so the sink joins the denominator once, rescaled with the max like any key. With split-KV
only split 0 starts from the sink (the reduction then counts it once). Off (the default, and sinks_ptr
None at the launch, a constexpr) it compiles the kernel every other model runs, unchanged.

With NUM_SPLITS > 1 (flash decoding) each program covers one slice of the key range and writes
its unnormalised output with its running max and sum; `_reduce_splits_kernel` merges them.
"""

from __future__ import annotations

import triton
import triton.language as tl

from model_optimizer.runtime.kernels import pdl
from model_optimizer.runtime.kernels.dots import dot

_LOG2E = tl.constexpr(1.4426950408889634)
_NEG_BIG = tl.constexpr(-1.0e30)  # finite "minus infinity": keeps exp2(m_old - m_new) free of NaN


@triton.jit
def _find_sequence(tile, qsl_ptr, num_seqs, BLOCK_Q: tl.constexpr):
    """Largest sequence index i with first_tile(i) <= tile (binary search over query_start_loc)."""
    lo = tl.zeros([], dtype=tl.int32)
    hi = tl.zeros([], dtype=tl.int32) + num_seqs
    while lo < hi:
        mid = (lo + hi) // 2
        first = tl.load(qsl_ptr + mid) // BLOCK_Q
        if BLOCK_Q > 1:
            first += mid
        go_right = first <= tile
        lo = tl.where(go_right, mid + 1, lo)
        hi = tl.where(go_right, hi, mid)
    return lo - 1


@triton.jit
def _drop_nonfinite_values(v, s, visible):
    """Zero NaN/inf values of a (TILE_N, D) tile and give NaN scores to the rows that see them.

    A masked score becomes a weight of exactly 0, but in p @ v, 0 * NaN is NaN: a poisoned later
    token of a prompt chunk would reach every earlier row of the tile (and through the prefix cache
    a later clean request). Rows that do see a non-finite value still end up NaN, as in the reference.
    """
    v_ok = tl.abs(v.to(tl.float32)) < float("inf")  # False for NaN too
    key_bad = tl.max(tl.where(v_ok, 0, 1), axis=1)  # (TILE_N,)
    s = tl.where(visible & (key_bad[None, :] > 0), float("nan"), s)
    return tl.where(v_ok, v, tl.zeros_like(v)), s


@triton.jit
def _softcap_log2(s, CAP: tl.constexpr):
    """CAP * tanh(s / CAP) times log2(e): a score capped as Gemma 2 caps it, in the base-2 units the online
    softmax works in. tanh is taken from exp2 of -2|s| / CAP, never positive, so no score overflows it;
    NaN stays NaN (a poisoned key reaches only the rows that see it, as without capping)."""
    t = tl.exp2(tl.abs(s) * (-2.0 * _LOG2E / CAP))
    capped = (1.0 - t) / (1.0 + t)
    return tl.where(s < 0.0, -capped, capped) * (CAP * _LOG2E)


@triton.jit
def _load_values(values_ptr, slot_off, dims, pos_ok, dim_ok):
    """(TILE_N, HEAD_DIM_PAD) tile of V at the key slots `slot_off` (zero where masked)."""
    return tl.load(values_ptr + slot_off[:, None] + dims[None, :], mask=pos_ok[:, None] & dim_ok[None, :], other=0.0)


# num_seqs and the block-table width change every step: specialising on them (== 1, % 16)
# recompiled the kernel mid-run, stalling a step each time (README "Where the time goes")
@triton.jit(do_not_specialize=["sliding_window", "num_seqs", "stride_bt"])
def _paged_attention_kernel(
    out_ptr,
    part_acc_ptr,
    part_max_ptr,
    part_sum_ptr,
    q_ptr,
    cache_ptr,
    qsl_ptr,
    seq_lens_ptr,
    block_tables_ptr,
    k_scale_ptr,
    v_scale_ptr,
    scale,
    q_scale,
    sliding_window,
    num_seqs,
    num_heads,
    stride_qt,
    stride_qh,
    stride_ot,
    stride_oh,
    stride_plane,
    stride_block,
    stride_offset,
    stride_head,
    stride_bt,
    GROUP: tl.constexpr,
    GROUP_PAD: tl.constexpr,
    HEAD_DIM: tl.constexpr,
    HEAD_DIM_PAD: tl.constexpr,
    BLOCK_SIZE: tl.constexpr,
    BLOCK_Q: tl.constexpr,
    TILE_N: tl.constexpr,
    NUM_SPLITS: tl.constexpr,
    USE_WINDOW: tl.constexpr,
    HAS_SCALES: tl.constexpr,
    DOT_DTYPE: tl.constexpr,
    DECODE_ONLY: tl.constexpr,
    PRESCALE_Q: tl.constexpr,
    SOFTCAP: tl.constexpr = 0.0,
    sinks_ptr=None,
    HAS_SINKS: tl.constexpr = False,
    PDL: tl.constexpr = False,
):
    pdl.wait_then_release(PDL)
    tile = tl.program_id(0)
    kv_head = tl.program_id(1)
    split = tl.program_id(2)
    if DECODE_ONLY:  # at most one new token per sequence: program i serves sequence i, no search
        seq = tile
        q_start = tl.load(qsl_ptr + seq)
        q_len = tl.load(qsl_ptr + seq + 1) - q_start
        t0 = tl.zeros([], dtype=tl.int32)
    else:
        seq = _find_sequence(tile, qsl_ptr, num_seqs, BLOCK_Q)
        first_tile = tl.load(qsl_ptr + seq) // BLOCK_Q
        if BLOCK_Q > 1:
            first_tile += seq
        q_start = tl.load(qsl_ptr + seq)
        q_len = tl.load(qsl_ptr + seq + 1) - q_start
        t0 = (tile - first_tile) * BLOCK_Q  # first token of this tile within the sequence's chunk
    seq_len = tl.load(seq_lens_ptr + seq)  # read before the exit test: one memory round trip, not two
    if t0 >= q_len:
        return
    num_cached = seq_len - q_len

    BLOCK_M: tl.constexpr = BLOCK_Q * GROUP_PAD
    rows = tl.arange(0, BLOCK_M)
    tok = t0 + rows // GROUP_PAD  # (BLOCK_M,) token index within the chunk
    head_in_group = rows % GROUP_PAD
    row_ok = (tok < q_len) & (head_in_group < GROUP)
    head = kv_head * GROUP + head_in_group
    dims = tl.arange(0, HEAD_DIM_PAD)
    dim_ok = dims < HEAD_DIM
    q_rows = (q_start + tok).to(tl.int64)
    q = tl.load(
        q_ptr + q_rows[:, None] * stride_qt + head[:, None] * stride_qh + dims[None, :],
        mask=row_ok[:, None] & dim_ok[None, :],
        other=0.0,
    )  # (BLOCK_M, HEAD_DIM_PAD)
    if PRESCALE_Q:  # fp16 operands (fp8 cache): scaled first, so a large q stays inside fp16's range
        q = q.to(tl.float32) * q_scale
    q = q.to(DOT_DTYPE)
    q_pos = num_cached + tok

    # keys this tile can see: [kv_lo, kv_hi), then this program's split of it
    kv_hi = num_cached + tl.minimum(t0 + BLOCK_Q, q_len)
    kv_lo = tl.zeros([], dtype=tl.int32)
    if USE_WINDOW:
        kv_lo = tl.maximum(num_cached + t0 - sliding_window + 1, 0)
        kv_lo = (kv_lo // TILE_N) * TILE_N
    if NUM_SPLITS > 1:
        part = tl.cdiv(tl.cdiv(kv_hi - kv_lo, NUM_SPLITS), TILE_N) * TILE_N
        kv_lo = kv_lo + split * part
        kv_hi = tl.minimum(kv_lo + part, kv_hi)

    if SOFTCAP > 0.0:
        qk_scale = scale  # true scores: capped first, then taken to base 2 (_softcap_log2)
    else:
        qk_scale = scale * _LOG2E
    if HAS_SCALES:
        qk_scale = qk_scale * tl.load(k_scale_ptr)
    m_i = tl.zeros([BLOCK_M], dtype=tl.float32) + _NEG_BIG
    l_i = tl.zeros([BLOCK_M], dtype=tl.float32)
    if HAS_SINKS:  # the sink's logit is the first "key" each row sees: max = sink, sum = exp2(0)
        sink = tl.load(sinks_ptr + head, mask=row_ok, other=0.0).to(tl.float32) * _LOG2E
        if NUM_SPLITS > 1:  # once per row: in split 0 only
            m_i = tl.where(split == 0, sink, m_i)
            l_i = tl.where(split == 0, 1.0, l_i)
        else:
            m_i = sink
            l_i = l_i + 1.0
    acc = tl.zeros([BLOCK_M, HEAD_DIM_PAD], dtype=tl.float32)
    cols = tl.arange(0, TILE_N)
    table = block_tables_ptr + seq.to(tl.int64) * stride_bt
    head_off = kv_head.to(tl.int64) * stride_head
    for start in range(kv_lo, kv_hi, TILE_N):
        pos = start + cols  # (TILE_N,) key positions
        pos_ok = pos < kv_hi
        block = tl.load(table + pos // BLOCK_SIZE, mask=pos_ok, other=0).to(tl.int64)
        slot_off = block * stride_block + (pos % BLOCK_SIZE) * stride_offset + head_off
        kv_mask = pos_ok[None, :] & dim_ok[:, None]
        k = tl.load(cache_ptr + slot_off[None, :] + dims[:, None], mask=kv_mask, other=0.0)  # (D, TILE_N)
        if BLOCK_Q == 1:  # one token per tile: every key loaded is visible to all its rows, so V is
            # read with K (both need only the block ids), one memory round trip per tile, not two
            v = _load_values(cache_ptr + stride_plane, slot_off, dims, pos_ok, dim_ok)
        s = dot(q, k.to(DOT_DTYPE), None, DOT_DTYPE) * qk_scale  # (BLOCK_M, TILE_N), log2 units
        if SOFTCAP > 0.0:  # the true scores, capped and taken to log2 units
            s = _softcap_log2(s, SOFTCAP)
        visible = (pos[None, :] <= q_pos[:, None]) & pos_ok[None, :]
        if USE_WINDOW:
            visible = visible & (pos[None, :] > q_pos[:, None] - sliding_window)
        s = tl.where(visible, s, float("-inf"))
        if BLOCK_Q > 1:  # rows of several tokens load keys that lie past some rows' positions
            v = _load_values(cache_ptr + stride_plane, slot_off, dims, pos_ok, dim_ok)
            v, s = _drop_nonfinite_values(v.to(DOT_DTYPE), s, visible)
        m_new = tl.maximum(m_i, tl.max(s, axis=1))
        p = tl.exp2(s - m_new[:, None])
        alpha = tl.exp2(m_i - m_new)
        l_i = l_i * alpha + tl.sum(p, axis=1)
        acc = acc * alpha[:, None] + dot(p.to(DOT_DTYPE), v.to(DOT_DTYPE), None, DOT_DTYPE)
        m_i = m_new
    if HAS_SCALES:
        acc = acc * tl.load(v_scale_ptr)

    out_mask = row_ok[:, None] & dim_ok[None, :]
    if NUM_SPLITS == 1:
        l_safe = tl.where(l_i > 0.0, l_i, 1.0)
        o = acc / l_safe[:, None]
        tl.store(
            out_ptr + q_rows[:, None] * stride_ot + head[:, None] * stride_oh + dims[None, :],
            o.to(out_ptr.dtype.element_ty),
            mask=out_mask,
        )
    else:
        part_row = (q_rows * num_heads + head) * NUM_SPLITS + split  # partials: (tokens, heads, splits)
        tl.store(part_max_ptr + part_row, m_i, mask=row_ok)
        tl.store(part_sum_ptr + part_row, l_i, mask=row_ok)
        tl.store(part_acc_ptr + part_row[:, None] * HEAD_DIM_PAD + dims[None, :], acc, mask=out_mask)


@triton.jit(do_not_specialize=["num_seqs"])
def _reduce_splits_kernel(
    out_ptr,
    part_acc_ptr,
    part_max_ptr,
    part_sum_ptr,
    qsl_ptr,
    num_seqs,
    num_heads,
    stride_ot,
    stride_oh,
    HEAD_DIM: tl.constexpr,
    HEAD_DIM_PAD: tl.constexpr,
    NUM_SPLITS: tl.constexpr,
    SPLITS_PAD: tl.constexpr,
    PDL: tl.constexpr = False,
):
    """Merge the per-split partial results of one (token, head); tokens past the batch get zeros."""
    pdl.wait_then_release(PDL)
    token = tl.program_id(0)
    head = tl.program_id(1)
    # The partials are read without waiting for the batch size (one memory round trip, not two): a
    # token past the batch (a CUDA graph's padding) reads stale rows, and its output is zeroed below.
    num_tokens_in_batch = tl.load(qsl_ptr + num_seqs)
    in_batch = token < num_tokens_in_batch
    splits = tl.arange(0, SPLITS_PAD)
    split_ok = splits < NUM_SPLITS
    dims = tl.arange(0, HEAD_DIM_PAD)
    row = (token.to(tl.int64) * num_heads + head) * NUM_SPLITS + splits
    m = tl.load(part_max_ptr + row, mask=split_ok, other=_NEG_BIG)
    s = tl.load(part_sum_ptr + row, mask=split_ok, other=0.0)
    acc = tl.load(part_acc_ptr + row[:, None] * HEAD_DIM_PAD + dims[None, :], mask=split_ok[:, None], other=0.0)
    m_all = tl.max(m, axis=0)
    w = tl.where(split_ok, tl.exp2(m - m_all), 0.0)
    denom = tl.sum(w * s, axis=0)
    o = tl.sum(w[:, None] * acc, axis=0) / tl.where(denom > 0.0, denom, 1.0)
    o = tl.where(in_batch, o, 0.0)
    tl.store(
        out_ptr + token.to(tl.int64) * stride_ot + head * stride_oh + dims,
        o.to(out_ptr.dtype.element_ty),
        mask=dims < HEAD_DIM,
    )
