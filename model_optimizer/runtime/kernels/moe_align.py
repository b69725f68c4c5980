"""Alignment of the MoE (token, k) pairs across many Triton programs (decode batches of 64-512 tokens).

The one-program `fused_moe._align_kernel` walks every chunk of pairs, every block and every row in
turn: at 512 pairs (64 tokens, top-8) that serial walk, not the arithmetic, is its cost. Here the
same layout takes two launches whose programs each do one chunk's worth of work:

1. `_align_count_kernel`: program c counts the pairs of each expert in its chunk of CHUNK pairs
   into row c of a (chunks, experts) table. Plain stores, no atomics: the table, and so every
   row below, is the same at every run.
2. `_align_scatter_kernel`: every program sums the table (small: at 4,096 pairs, 128 chunks by
   the experts) into each expert's count and padded run. The first `chunks` programs write their
   pairs: a pair's row is its expert's run start + that expert's pairs in earlier chunks + its
   expert's pairs earlier in the chunk, so each run keeps pair order (the stable sort's order).
   The other programs each own FILL_BLOCKS blocks: they write the block's expert (-1 past the last
   run) and the sentinel `num_pairs` into the rows of their blocks no pair takes. Every row is
   written by exactly one program, so no ordering between programs is needed.

Grids depend only on the pair count (a shape), never on the ids: no host sync, CUDA-graph safe.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

CHUNK = 32
"""Pairs per counting / scattering program."""
TABLE_TILE = 32
"""Chunk rows of the count table summed per step."""
FILL_BLOCKS = 16
"""Blocks of rows whose padding and expert one filling program writes."""


def max_padded_pairs(num_pairs: int, num_experts: int, block_m: int) -> int:
    """Rows the sorted, padded pairs can need: each expert that has pairs adds at most block_m - 1."""
    return triton.cdiv(num_pairs + min(num_pairs, num_experts) * (block_m - 1), block_m) * block_m


@triton.jit(do_not_specialize=["num_pairs"])
def _align_count_kernel(
    ids_ptr, table_ptr, num_pairs, NUM_EXPERTS: tl.constexpr, EXPERTS_PAD: tl.constexpr, CHUNK: tl.constexpr
):
    """Row `program` of the table: pairs per expert in this chunk (0 for ids outside the experts)."""
    chunk = tl.program_id(0)
    pair = chunk * CHUNK + tl.arange(0, CHUNK)
    experts = tl.arange(0, EXPERTS_PAD)
    e = tl.load(ids_ptr + pair, mask=pair < num_pairs, other=-1).to(tl.int32)
    onehot = (e[:, None] == experts[None, :]) & (experts[None, :] < NUM_EXPERTS)
    tl.store(table_ptr + chunk * EXPERTS_PAD + experts, tl.sum(onehot.to(tl.int32), axis=0))


@triton.jit
def _expert_runs(
    table_ptr, num_chunks, before_chunk, EXPERTS_PAD: tl.constexpr, BLOCK_M: tl.constexpr, TILE: tl.constexpr
):
    """Per expert: (pairs, first row of its run, row past its run, its pairs in chunks < before_chunk)."""
    experts = tl.arange(0, EXPERTS_PAD)
    tile = tl.arange(0, TILE)
    counts = tl.zeros((EXPERTS_PAD,), dtype=tl.int32)
    before = tl.zeros((EXPERTS_PAD,), dtype=tl.int32)
    for first in range(0, num_chunks, TILE):
        chunks = first + tile
        part = tl.load(
            table_ptr + chunks[:, None] * EXPERTS_PAD + experts[None, :], mask=chunks[:, None] < num_chunks, other=0
        )
        counts += tl.sum(part, axis=0)
        before += tl.sum(tl.where(chunks[:, None] < before_chunk, part, 0), axis=0)
    padded = (counts + BLOCK_M - 1) // BLOCK_M * BLOCK_M
    ends = tl.cumsum(padded, 0)
    return counts, ends - padded, ends, before


@triton.jit
def _scatter_chunk(
    ids_ptr,
    sorted_ids_ptr,
    chunk,
    num_pairs,
    run_start,
    before,
    experts,
    NUM_EXPERTS: tl.constexpr,
    CHUNK: tl.constexpr,
):
    """Write each pair of this chunk to its row; pairs of dropped ids are written nowhere."""
    lanes = tl.arange(0, CHUNK)
    pair = chunk * CHUNK + lanes
    e = tl.load(ids_ptr + pair, mask=pair < num_pairs, other=-1).to(tl.int32)
    onehot = (e[:, None] == experts[None, :]) & (experts[None, :] < NUM_EXPERTS)  # (CHUNK, EXPERTS_PAD)
    same_before = (e[:, None] == e[None, :]) & (lanes[None, :] < lanes[:, None])  # earlier pairs, same expert
    row = tl.sum(tl.where(onehot, (run_start + before)[None, :], 0), axis=1) + tl.sum(same_before.to(tl.int32), axis=1)
    live = tl.sum(onehot.to(tl.int32), axis=1) > 0
    tl.store(sorted_ids_ptr + row, pair, mask=live)


@triton.jit
def _fill_blocks(
    sorted_ids_ptr,
    block_expert_ptr,
    first_block,
    num_pairs,
    num_rows,
    counts,
    run_start,
    ends,
    experts,
    BLOCK_M: tl.constexpr,
    FILL_BLOCKS: tl.constexpr,
):
    """Expert of each of FILL_BLOCKS blocks, and the sentinel in their rows past the run's pairs."""
    blocks = first_block + tl.arange(0, FILL_BLOCKS)
    starts = blocks * BLOCK_M
    # the one expert whose (non-empty) run holds the block's first row, if any
    owns = (run_start[None, :] <= starts[:, None]) & (starts[:, None] < ends[None, :])  # (FILL_BLOCKS, EXPERTS_PAD)
    owned = tl.sum(owns.to(tl.int32), axis=1) > 0
    owner = tl.where(owned, tl.sum(tl.where(owns, experts[None, :], 0), axis=1), -1)
    tl.store(block_expert_ptr + blocks, owner, mask=starts < num_rows)
    first_pad = tl.sum(tl.where(owns, (run_start + counts)[None, :], 0), axis=1)  # 0 where no run: all padding
    rows = starts[:, None] + tl.arange(0, BLOCK_M)[None, :]
    padding = tl.zeros((FILL_BLOCKS, BLOCK_M), dtype=tl.int32) + num_pairs
    tl.store(sorted_ids_ptr + rows, padding, mask=(rows >= first_pad[:, None]) & (rows < num_rows))


@triton.jit(do_not_specialize=["num_pairs", "num_rows", "num_chunks"])
def _align_scatter_kernel(
    ids_ptr,
    table_ptr,
    sorted_ids_ptr,
    block_expert_ptr,
    num_pairs,
    num_rows,
    num_chunks,
    NUM_EXPERTS: tl.constexpr,
    EXPERTS_PAD: tl.constexpr,
    BLOCK_M: tl.constexpr,
    CHUNK: tl.constexpr,
    TILE: tl.constexpr,
    FILL_BLOCKS: tl.constexpr,
):
    """Programs < num_chunks: scatter their chunk's pairs; the rest: blocks' experts and padding."""
    program = tl.program_id(0)
    experts = tl.arange(0, EXPERTS_PAD)
    if program < num_chunks:
        _, run_start, _, before = _expert_runs(table_ptr, num_chunks, program, EXPERTS_PAD, BLOCK_M, TILE)
        _scatter_chunk(ids_ptr, sorted_ids_ptr, program, num_pairs, run_start, before, experts, NUM_EXPERTS, CHUNK)
    else:
        counts, run_start, ends, _ = _expert_runs(table_ptr, num_chunks, 0, EXPERTS_PAD, BLOCK_M, TILE)
        first_block = (program - num_chunks) * FILL_BLOCKS
        _fill_blocks(
            sorted_ids_ptr,
            block_expert_ptr,
            first_block,
            num_pairs,
            num_rows,
            counts,
            run_start,
            ends,
            experts,
            BLOCK_M,
            FILL_BLOCKS,
        )


def align_pairs_parallel(topk_ids: torch.Tensor, num_experts: int, block_m: int) -> tuple[torch.Tensor, torch.Tensor]:
    """`fused_moe.align_pairs` in two launches of many programs: the same rows as the stable sort."""
    flat = topk_ids.reshape(-1)
    num_pairs, device = flat.numel(), flat.device
    rows = max_padded_pairs(num_pairs, num_experts, block_m)
    sorted_ids = torch.empty(rows, dtype=torch.int32, device=device)
    block_expert = torch.empty(rows // block_m, dtype=torch.int32, device=device)
    if not rows:
        return sorted_ids, block_expert
    experts_pad = triton.next_power_of_2(num_experts)
    num_chunks = triton.cdiv(num_pairs, CHUNK)
    table = torch.empty(num_chunks, experts_pad, dtype=torch.int32, device=device)  # every entry written
    _align_count_kernel[(num_chunks,)](
        flat, table, num_pairs, NUM_EXPERTS=num_experts, EXPERTS_PAD=experts_pad, CHUNK=CHUNK, num_warps=4
    )
    fill_programs = triton.cdiv(rows // block_m, FILL_BLOCKS)
    _align_scatter_kernel[(num_chunks + fill_programs,)](
        flat,
        table,
        sorted_ids,
        block_expert,
        num_pairs,
        rows,
        num_chunks,
        NUM_EXPERTS=num_experts,
        EXPERTS_PAD=experts_pad,
        BLOCK_M=block_m,
        CHUNK=CHUNK,
        TILE=TABLE_TILE,
        FILL_BLOCKS=FILL_BLOCKS,
        num_warps=4,
    )
    return sorted_ids, block_expert
