"""Fused mixture-of-experts on the GPU: tokens sorted by expert, two grouped GEMMs over all experts.

Same contract and layouts as `moe_reference.fused_moe_ref` (x, w13 = [gate | up], w2, top-k weights
and ids, -1 for an expert on another rank). A per-expert loop launches three matmuls and two
gathers for every expert that has tokens: at decode, hundreds of small launches per layer.
Here one step is:

1. `align_pairs`: each (token, k) pair is an index `token * top_k + k`. The pairs are sorted by
   expert and each expert's run is padded to a multiple of `block_m` rows (padding holds the
   sentinel `num_pairs`), so every block of rows belongs to one expert (`block_expert`, -1 past
   the end). Torch ops with shapes fixed by the token count: no host sync, CUDA-graph safe.
2. The gate_up GEMM: one program per (block, column tile) multiplies its rows of x by its
   expert's gate and up tiles and writes silu(gate) * up, in float32 until the store, to the
   pair's row of an intermediate (pairs, intermediate).
3. The down GEMM: the same over the intermediate and w2, each row scaled by its routing weight
   in the epilogue, written to the pair's row of (pairs, hidden).
4. The k rows of each token are summed in float32 in a fixed order (`_sum_over_k_kernel`, one
   launch; torch's bf16 reduction over the middle dimension took about twice as long at decode):
   no atomics, so the result does not depend on scheduling.

Programs of blocks past the last expert's run return at once: the grid is sized for the worst
case (every pair its own expert), which a decode batch never reaches.

gpt-oss's experts (models/gpt_oss.py) add two things, each a constexpr of the GEMM kernel that is off for
every other model (the kernel they run compiles unchanged): per-expert biases (`w13_bias` (experts,
2 * intermediate), gate then up like w13's rows, and `w2_bias` (experts, hidden)), added to the float32
accumulator before the activation and before the routing weight; and the clamped SwiGLU
(`moe_reference.ClampedSwiglu`) in place of silu(gate) * up.
"""

from __future__ import annotations

import os

import torch
import triton
import triton.language as tl

from model_optimizer.runtime.kernels import aot
from model_optimizer.runtime.kernels.dots import dot
from model_optimizer.runtime.kernels.fused_ops import round_to
from model_optimizer.runtime.kernels.moe_align import align_pairs_parallel, max_padded_pairs
from model_optimizer.runtime.kernels.moe_reference import ClampedSwiglu
from model_optimizer.runtime.kernels.moe_tiles import MoeTiles, choose_tiles


def align_pairs(topk_ids: torch.Tensor, num_experts: int, block_m: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(sorted_ids (padded_rows,) int32, block_expert (padded_rows / block_m,) int32): see the module docstring.

    Pairs of an id outside [0, num_experts) are dropped (their rows are never computed). Up to
    ALIGN_ONE_PROGRAM_MAX_PAIRS pairs one Triton program does it all (one launch; its serial walk is
    short); up to ALIGN_KERNEL_MAX_PAIRS (decode batches) `moe_align.align_pairs_parallel` spreads it
    over many programs in two launches; larger batches (prefill) take `align_pairs_sorted`, about
    twenty torch kernels whose launches a long prefill hides. All three give the same rows."""
    if aot.on_gpu(topk_ids) and topk_ids.numel() <= ALIGN_ONE_PROGRAM_MAX_PAIRS:
        return align_pairs_kernel(topk_ids, num_experts, block_m)
    if aot.on_gpu(topk_ids) and topk_ids.numel() <= ALIGN_KERNEL_MAX_PAIRS:
        return align_pairs_parallel(topk_ids, num_experts, block_m)
    return align_pairs_sorted(topk_ids, num_experts, block_m)


def pair_blocks(
    topk_ids: torch.Tensor, num_experts: int, block_m: int, all_ids_local: bool
) -> tuple[torch.Tensor, torch.Tensor]:
    """The blocks the GEMMs run: one token's pairs as blocks of their own (`_one_token_blocks`, no launch)
    when every id is a local expert, else `align_pairs`. What `fused_moe` runs and what its sweep times."""
    one_token = _one_token_blocks(topk_ids, block_m) if topk_ids.shape[0] == 1 and all_ids_local else None
    return one_token or align_pairs(topk_ids, num_experts, block_m)


def _one_token_blocks(topk_ids: torch.Tensor, block_m: int) -> tuple[torch.Tensor, torch.Tensor] | None:
    """`align_pairs` of one token without a launch: its k experts are distinct, so pair i is block i
    alone (rows [i, padding...]: a constant) and block i's expert is id i (the ids, read in place).
    Batch-1 decode saves the alignment kernel in every layer. The ids must all be local experts (the
    caller's `all_ids_local`); None while a CUDA graph is captured and the constant is not yet made."""
    key = (topk_ids.shape[1], block_m, topk_ids.device)
    rows = _ONE_TOKEN_ROWS.get(key)
    if rows is None:
        if aot.capturing():
            return None  # no allocation of a long-lived tensor inside a capture
        top_k = topk_ids.shape[1]
        rows = torch.full((top_k, block_m), top_k, dtype=torch.int32, device=topk_ids.device)
        rows[:, 0] = torch.arange(top_k, dtype=torch.int32, device=topk_ids.device)
        rows = _ONE_TOKEN_ROWS.setdefault(key, rows.reshape(-1))
    return rows, topk_ids.reshape(-1)


_ONE_TOKEN_ROWS: dict[tuple, torch.Tensor] = {}
"""(top_k, block_m, device) -> the sorted rows of one token's pairs (see `_one_token_blocks`)."""


ALIGN_ONE_PROGRAM_MAX_PAIRS = 32
"""Pairs up to which the one-program kernel runs: one chunk of the parallel path (batch <= 4 at top-8),
where its two launches would add a launch and no parallelism in the scatter (unmeasured choice)."""
ALIGN_KERNEL_MAX_PAIRS = 4096
"""Pairs up to which the alignment runs in Triton (512 at a decode batch of 64 with top-8)."""


def align_pairs_sorted(topk_ids: torch.Tensor, num_experts: int, block_m: int) -> tuple[torch.Tensor, torch.Tensor]:
    """`align_pairs` by a stable sort of the pairs by expert, in torch ops (the reference of the kernel)."""
    flat = topk_ids.reshape(-1).long()
    num_pairs, device = flat.numel(), flat.device
    rows = max_padded_pairs(num_pairs, num_experts, block_m)
    bins = torch.where((flat >= 0) & (flat < num_experts), flat, num_experts)  # num_experts: dropped
    counts = torch.zeros(num_experts + 1, dtype=torch.int64, device=device)
    counts.scatter_add_(0, bins, torch.ones_like(bins))
    padded = (counts + block_m - 1) // block_m * block_m
    padded[num_experts] = 0
    ends = padded.cumsum(0)
    order = torch.argsort(bins, stable=True)  # pair indices grouped by expert, in pair order
    sorted_bins = bins[order]
    rank = torch.arange(num_pairs, device=device) - (counts.cumsum(0) - counts)[sorted_bins]  # within its expert
    dest = torch.where(sorted_bins == num_experts, rows, ends[sorted_bins] - padded[sorted_bins] + rank)
    sorted_ids = torch.full((rows + 1,), num_pairs, dtype=torch.int32, device=device)  # row `rows`: dropped
    sorted_ids[dest] = order.to(torch.int32)
    block_starts = torch.arange(0, rows, block_m, device=device)
    block_expert = torch.searchsorted(ends[:num_experts], block_starts, right=True)
    block_expert = torch.where(block_expert < num_experts, block_expert, -1).to(torch.int32)
    return sorted_ids[:rows], block_expert


@triton.jit(do_not_specialize=["num_pairs", "num_rows"])
def _align_kernel(
    ids_ptr,
    sorted_ids_ptr,
    block_expert_ptr,
    num_pairs,
    num_rows,
    NUM_EXPERTS: tl.constexpr,
    EXPERTS_PAD: tl.constexpr,
    BLOCK_M: tl.constexpr,
    CHUNK: tl.constexpr,
):
    """One program: count the pairs of each expert, lay out the padded runs, then write each pair to its
    row (its expert's run start + pairs of that expert before it). Work O(pairs x (experts + CHUNK))."""
    experts = tl.arange(0, EXPERTS_PAD)
    lanes = tl.arange(0, CHUNK)
    counts = tl.zeros((EXPERTS_PAD,), dtype=tl.int32)
    for start in range(0, num_pairs, CHUNK):
        e = tl.load(ids_ptr + start + lanes, mask=start + lanes < num_pairs, other=-1).to(tl.int32)
        counts += tl.sum((e[:, None] == experts[None, :]).to(tl.int32), axis=0)
    counts = tl.where(experts < NUM_EXPERTS, counts, 0)  # ids past the experts: another rank's, dropped
    padded = (counts + BLOCK_M - 1) // BLOCK_M * BLOCK_M
    ends = tl.cumsum(padded, 0)
    for first in range(0, num_rows // BLOCK_M, CHUNK):
        blocks = first + lanes
        # a block belongs to the first expert whose run ends after the block's first row
        owner = tl.sum((ends[None, :] <= blocks[:, None] * BLOCK_M).to(tl.int32), axis=1)
        owner = tl.where(owner < NUM_EXPERTS, owner, -1)
        tl.store(block_expert_ptr + blocks, owner, mask=blocks * BLOCK_M < num_rows)
    padding = tl.zeros((CHUNK,), dtype=tl.int32) + num_pairs
    for start in range(0, num_rows, CHUNK):  # every row padding first
        tl.store(sorted_ids_ptr + start + lanes, padding, mask=start + lanes < num_rows)
    tl.debug_barrier()  # the padding is written before any real pair overwrites it
    next_row = ends - padded  # per expert: the row its next pair takes
    for start in range(0, num_pairs, CHUNK):
        pair = start + lanes
        e = tl.load(ids_ptr + pair, mask=pair < num_pairs, other=-1).to(tl.int32)
        onehot = (e[:, None] == experts[None, :]) & (experts[None, :] < NUM_EXPERTS)  # (CHUNK, EXPERTS_PAD)
        same_before = (e[:, None] == e[None, :]) & (lanes[None, :] < lanes[:, None])  # earlier pairs, same expert
        row = tl.sum(tl.where(onehot, next_row[None, :], 0), axis=1) + tl.sum(same_before.to(tl.int32), axis=1)
        live = tl.sum(onehot.to(tl.int32), axis=1) > 0
        tl.store(sorted_ids_ptr + row, pair, mask=live)
        next_row += tl.sum(onehot.to(tl.int32), axis=0)


def align_pairs_kernel(topk_ids: torch.Tensor, num_experts: int, block_m: int) -> tuple[torch.Tensor, torch.Tensor]:
    """`align_pairs` in one Triton program (decode-sized batches)."""
    flat = topk_ids.reshape(-1)
    num_pairs = flat.numel()
    rows = max_padded_pairs(num_pairs, num_experts, block_m)
    sorted_ids = torch.empty(rows, dtype=torch.int32, device=flat.device)
    block_expert = torch.empty(rows // block_m, dtype=torch.int32, device=flat.device)
    if rows:
        _align_kernel[(1,)](
            flat,
            sorted_ids,
            block_expert,
            num_pairs,
            rows,
            NUM_EXPERTS=num_experts,
            EXPERTS_PAD=triton.next_power_of_2(num_experts),
            BLOCK_M=block_m,
            CHUNK=32,
            num_warps=4,
        )
    return sorted_ids, block_expert


@triton.jit(do_not_specialize=["num_pairs"])
def _moe_gemm_kernel(
    a_ptr,
    w_ptr,
    out_ptr,
    sorted_ids_ptr,
    block_expert_ptr,
    route_w_ptr,
    num_pairs,
    num_experts,
    N,
    K,
    stride_am,
    stride_we,
    stride_wn,
    stride_om,
    PAIRS_PER_A_ROW: tl.constexpr,
    GATED: tl.constexpr,
    WEIGHTED: tl.constexpr,
    EVEN_K: tl.constexpr,
    DOT_DTYPE: tl.constexpr,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_K: tl.constexpr,
    bias_ptr=None,
    HAS_BIAS: tl.constexpr = False,
    SWIGLU_ALPHA: tl.constexpr = 0.0,
    SWIGLU_LIMIT: tl.constexpr = 0.0,
):
    """out[pair, cols] = a[pair // PAIRS_PER_A_ROW] @ w[expert, cols].T for one block of pairs, one
    expert; GATED: w holds N gate rows then N up rows and out is silu(gate) * up; WEIGHTED: each row
    times its routing weight. Padding rows (pair == num_pairs) are neither read nor written.
    HAS_BIAS: plus bias[expert] ((2N,) gate then up when GATED, else (N,)), contiguous, before the activation
    and the weight. SWIGLU_LIMIT > 0: the activation is gpt-oss's clamped SwiGLU, (clamp(up, -L, L) + 1) *
    g * sigmoid(SWIGLU_ALPHA * g) with g = min(gate, L). Both off: the kernel every other model runs."""
    pid = tl.program_id(0)
    num_n = tl.cdiv(N, BLOCK_N)
    pid_m = pid // num_n
    pid_n = pid % num_n
    expert = tl.load(block_expert_ptr + pid_m)
    # < 0: past the last expert's run; >= num_experts: the router's id for a NaN row, which batch-1 decode
    # reads as a block's expert without alignment (`_one_token_blocks`): no weight past the last expert read
    if (expert < 0) | (expert >= num_experts):
        return
    pair = tl.load(sorted_ids_ptr + pid_m * BLOCK_M + tl.arange(0, BLOCK_M))
    row_ok = pair < num_pairs
    a_rows = a_ptr + (pair // PAIRS_PER_A_ROW).to(tl.int64)[:, None] * stride_am
    cols = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    col_ok = cols < N
    w_cols = w_ptr + expert.to(tl.int64) * stride_we + cols[None, :].to(tl.int64) * stride_wn
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    up = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k_start in range(0, K, BLOCK_K):
        ks = k_start + tl.arange(0, BLOCK_K)
        k_ok = ks < K
        if EVEN_K:
            k_ok = ks >= 0  # all true: no masking along K
        a = tl.load(a_rows + ks[None, :], mask=row_ok[:, None] & k_ok[None, :], other=0.0)  # (BLOCK_M, BLOCK_K)
        w_mask = col_ok[None, :] & k_ok[:, None]
        w = tl.load(w_cols + ks[:, None], mask=w_mask, other=0.0)  # (BLOCK_K, BLOCK_N)
        acc = dot(a.to(DOT_DTYPE), w.to(DOT_DTYPE), acc, DOT_DTYPE)
        if GATED:
            w_up = tl.load(w_cols + N * stride_wn + ks[:, None], mask=w_mask, other=0.0)
            up = dot(a.to(DOT_DTYPE), w_up.to(DOT_DTYPE), up, DOT_DTYPE)
    if HAS_BIAS:
        if GATED:
            bias_row = bias_ptr + expert.to(tl.int64) * (2 * N) + cols
            up += tl.load(bias_row + N, mask=col_ok, other=0.0).to(tl.float32)[None, :]
        else:
            bias_row = bias_ptr + expert.to(tl.int64) * N + cols
        acc += tl.load(bias_row, mask=col_ok, other=0.0).to(tl.float32)[None, :]
    if GATED:
        if SWIGLU_LIMIT > 0.0:  # gpt-oss: gate clamped above, up on both sides, up + 1
            gate = tl.minimum(acc, SWIGLU_LIMIT)
            up = tl.minimum(tl.maximum(up, -SWIGLU_LIMIT), SWIGLU_LIMIT)
            acc = (up + 1.0) * (gate * tl.sigmoid(gate * SWIGLU_ALPHA))
        else:
            acc = acc * tl.sigmoid(acc) * up  # silu(gate) * up
    if WEIGHTED:
        acc = acc * tl.load(route_w_ptr + pair, mask=row_ok, other=0.0)[:, None]
    out = out_ptr + pair.to(tl.int64)[:, None] * stride_om + cols[None, :]
    tl.store(out, acc.to(out_ptr.dtype.element_ty), mask=row_ok[:, None] & col_ok[None, :])


@triton.jit
def _sum_over_k_kernel(rows_ptr, out_ptr, hidden, TOP_K: tl.constexpr, BLOCK_H: tl.constexpr):
    """out[token, cols] = sum over k of rows[token * TOP_K + k, cols], added in k order in float32."""
    token = tl.program_id(0).to(tl.int64)
    cols = tl.program_id(1) * BLOCK_H + tl.arange(0, BLOCK_H)
    ok = cols < hidden
    acc = tl.zeros((BLOCK_H,), dtype=tl.float32)
    for k in tl.static_range(TOP_K):
        acc += tl.load(rows_ptr + (token * TOP_K + k) * hidden + cols, mask=ok, other=0.0).to(tl.float32)
    tl.store(out_ptr + token * hidden + cols, round_to(acc, out_ptr.dtype.element_ty), mask=ok)


def sum_over_k(rows: torch.Tensor, num_tokens: int, top_k: int) -> torch.Tensor:
    """(tokens * top_k, hidden) contiguous -> (tokens, hidden): each token's k rows summed."""
    if top_k == 1:
        return rows
    hidden = rows.shape[1]
    out = torch.empty(num_tokens, hidden, dtype=rows.dtype, device=rows.device)
    block_h = min(1024, triton.next_power_of_2(hidden))
    _sum_over_k_kernel[(num_tokens, triton.cdiv(hidden, block_h))](
        rows, out, hidden, TOP_K=top_k, BLOCK_H=block_h, num_warps=4
    )
    return out


def _dot_dtype(dtype: torch.dtype):
    """Operand type of tl.dot: the input's, except bf16 under the interpreter, whose bf16 dot is wrong."""
    if dtype == torch.bfloat16 and os.environ.get("TRITON_INTERPRET") == "1":
        return tl.float32
    return {torch.float16: tl.float16, torch.bfloat16: tl.bfloat16, torch.float32: tl.float32}[dtype]


def _gemm(
    a, w, out, sorted_ids, block_expert, route_w, pairs_per_a_row, gated, tiles, block_m, bias=None, activation=None
) -> None:
    n, k = out.shape[1], w.shape[2]
    extra = {}  # only when set: without them the launch, and the kernel, are every other model's
    if bias is not None:
        extra.update(bias_ptr=bias, HAS_BIAS=True)
    if activation is not None and gated:
        extra.update(SWIGLU_ALPHA=float(activation.alpha), SWIGLU_LIMIT=float(activation.limit))
    grid = (block_expert.numel() * triton.cdiv(n, tiles.block_n),)
    _moe_gemm_kernel[grid](
        a,
        w,
        out,
        sorted_ids,
        block_expert,
        route_w,
        out.shape[0],  # num_pairs
        w.shape[0],  # num_experts
        n,
        k,
        a.stride(0),
        w.stride(0),
        w.stride(1),
        out.stride(0),
        PAIRS_PER_A_ROW=pairs_per_a_row,
        GATED=gated,
        WEIGHTED=not gated,
        EVEN_K=k % tiles.block_k == 0,
        DOT_DTYPE=_dot_dtype(a.dtype),
        BLOCK_M=block_m,
        BLOCK_N=tiles.block_n,
        BLOCK_K=tiles.block_k,
        num_warps=tiles.num_warps,
        num_stages=tiles.num_stages,
        **extra,
    )


def fused_moe(
    x: torch.Tensor,
    w13: torch.Tensor,
    w2: torch.Tensor,
    topk_weights: torch.Tensor,
    topk_ids: torch.Tensor,
    tiles: MoeTiles | None = None,
    all_ids_local: bool = False,
    summed: bool = True,
    w13_bias: torch.Tensor | None = None,
    w2_bias: torch.Tensor | None = None,
    activation: ClampedSwiglu | None = None,
) -> torch.Tensor:
    """`moe_reference.fused_moe_ref` in two Triton launches (plus the sort): (tokens, hidden) in x.dtype;
    with `summed` False the weighted rows before their sum, (tokens * top_k, hidden) (layers/expert_rows.py).

    Inputs are trusted (the MoE layer builds them); `tiles` overrides the table (tests, benchmarks).
    `all_ids_local` promises every id is one of these experts (no expert parallelism): every row of
    the down GEMM's output is then written, and it needs no zeroing first.
    `w13_bias`, `w2_bias`, `activation`: gpt-oss's expert biases and clamped SwiGLU, as in `fused_moe_ref`
    (None: none, silu(gate) * up)."""
    num_tokens, hidden = x.shape
    num_experts, intermediate = w13.shape[0], w13.shape[1] // 2
    top_k = topk_ids.shape[1]
    if num_tokens == 0:
        return torch.zeros_like(x) if summed else x.new_zeros(0, hidden)
    x, w13, w2 = x.contiguous(), w13.contiguous(), w2.contiguous()
    tiles = tiles or choose_tiles(
        aot.device_facts(x.device.index)[0] if aot.on_gpu(x) else "",
        num_tokens,
        num_experts,
        hidden,
        intermediate,
        top_k,
    )
    sorted_ids, block_expert = pair_blocks(topk_ids, num_experts, tiles.block_m, all_ids_local)
    num_pairs = num_tokens * top_k
    weights = topk_weights.float().reshape(-1).contiguous()  # (pairs,) in pair order
    h = torch.empty(num_pairs, intermediate, dtype=x.dtype, device=x.device)  # read only where written
    if activation is not None and activation.limit <= 0:
        raise ValueError(f"the clamped SwiGLU needs a positive limit, got {activation.limit}")
    b13 = None if w13_bias is None else w13_bias.contiguous()
    b2 = None if w2_bias is None else w2_bias.contiguous()
    _gemm(x, w13, h, sorted_ids, block_expert, weights, top_k, True, tiles.gate_up, tiles.block_m, b13, activation)
    # the rows of pairs no block computes (experts of another rank) must add nothing
    out = (torch.empty if all_ids_local else torch.zeros)(num_pairs, hidden, dtype=x.dtype, device=x.device)
    _gemm(h, w2, out, sorted_ids, block_expert, weights, 1, False, tiles.down, tiles.block_m, b2)
    return sum_over_k(out, num_tokens, top_k) if summed else out
