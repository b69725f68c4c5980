"""Mixture of experts for one token as two matrix-vector products: batch-1 decode without the sort.

At one token the fused kernel (fused_moe.py) still aligns the pairs, runs each GEMM on tensor-core tiles
of 16 rows of which one is real, and sums the k rows in a third launch. Here one token's k experts are
read as plain matrix-vector products on the CUDA cores, which is all a single row needs:

1. gate_up: one program per (expert slot, column tile) reads its tile of the expert's gate rows and the
   same tile of its up rows along the whole hidden size and writes silu(gate) * up for that slot
   (k rows of the intermediate, in x's dtype, as fused_moe writes them).
2. down: one program per tile of hidden columns walks the token's k experts, each one's down rows times
   that slot's intermediate row, scaled by the routing weight, all summed in float32: the top-k sum
   happens in the program, so there is no third launch.

Two launches per layer against four, no padding rows. The ids must be this rank's experts (no expert
parallelism: fused_moe's `all_ids_local`); a token's k experts are distinct, as top-k gives them.
Whether it beats the fused kernel at one token is the GPU's to say (benchmarks/moe_kernels.py
--one-token times both); until a run has said so it is off unless MOPT_MOE_GEMV=1.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

import torch
import triton
import triton.language as tl

GEMV_ENV = "MOPT_MOE_GEMV"


@dataclass(frozen=True)
class GemvTiles:
    """Columns and reduction elements per step of each matrix-vector product."""

    gate_up_block_n: int = 16
    down_block_n: int = 16
    block_k: int = 256
    num_warps: int = 4


def enabled() -> bool:
    return os.environ.get(GEMV_ENV, "0") == "1"


@triton.jit
def _gate_up_gemv_kernel(
    x_ptr, w_ptr, ids_ptr, h_ptr, N, K, stride_we, stride_wn,
    BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, EVEN_K: tl.constexpr,
):  # fmt: skip
    """h[slot, cols] = silu(x . gate[expert, cols]) * (x . up[expert, cols]) for slot's expert."""
    slot = tl.program_id(0)
    cols = tl.program_id(1) * BLOCK_N + tl.arange(0, BLOCK_N)
    col_ok = cols < N
    expert = tl.load(ids_ptr + slot).to(tl.int64)
    gate_rows = w_ptr + expert * stride_we + cols.to(tl.int64)[:, None] * stride_wn
    up_rows = gate_rows + N * stride_wn
    gate = tl.zeros((BLOCK_N, BLOCK_K), dtype=tl.float32)
    up = tl.zeros((BLOCK_N, BLOCK_K), dtype=tl.float32)
    for k_start in range(0, K, BLOCK_K):
        ks = k_start + tl.arange(0, BLOCK_K)
        k_ok = ks < K
        if EVEN_K:
            k_ok = ks >= 0  # all true: no masking along K
        x = tl.load(x_ptr + ks, mask=k_ok, other=0.0).to(tl.float32)[None, :]
        mask = col_ok[:, None] & k_ok[None, :]
        gate += tl.load(gate_rows + ks[None, :], mask=mask, other=0.0).to(tl.float32) * x
        up += tl.load(up_rows + ks[None, :], mask=mask, other=0.0).to(tl.float32) * x
    g = tl.sum(gate, axis=1)
    out = g * tl.sigmoid(g) * tl.sum(up, axis=1)
    tl.store(h_ptr + slot * N + cols, out.to(h_ptr.dtype.element_ty), mask=col_ok)


@triton.jit
def _down_gemv_kernel(
    h_ptr, w_ptr, ids_ptr, route_w_ptr, out_ptr, N, K, stride_we, stride_wn,
    TOP_K: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, EVEN_K: tl.constexpr,
):  # fmt: skip
    """out[cols] = sum over slots of weight[slot] * (h[slot] . down[expert of slot, cols]), in float32."""
    cols = tl.program_id(0) * BLOCK_N + tl.arange(0, BLOCK_N)
    col_ok = cols < N
    acc = tl.zeros((BLOCK_N,), dtype=tl.float32)
    for slot in range(TOP_K):
        expert = tl.load(ids_ptr + slot).to(tl.int64)
        rows = w_ptr + expert * stride_we + cols.to(tl.int64)[:, None] * stride_wn
        part = tl.zeros((BLOCK_N, BLOCK_K), dtype=tl.float32)
        for k_start in range(0, K, BLOCK_K):
            ks = k_start + tl.arange(0, BLOCK_K)
            k_ok = ks < K
            if EVEN_K:
                k_ok = ks >= 0
            h = tl.load(h_ptr + slot * K + ks, mask=k_ok, other=0.0).to(tl.float32)[None, :]
            w = tl.load(rows + ks[None, :], mask=col_ok[:, None] & k_ok[None, :], other=0.0).to(tl.float32)
            part += w * h
        acc += tl.load(route_w_ptr + slot) * tl.sum(part, axis=1)
    tl.store(out_ptr + cols, acc.to(out_ptr.dtype.element_ty), mask=col_ok)


def moe_one_token(
    x: torch.Tensor,
    w13: torch.Tensor,
    w2: torch.Tensor,
    topk_weights: torch.Tensor,
    topk_ids: torch.Tensor,
    tiles: GemvTiles | None = None,
) -> torch.Tensor:
    """fused_moe for x of one row (1, hidden) whose k ids are distinct local experts: (1, hidden) in x's dtype."""
    tiles = tiles or GemvTiles()
    hidden, inter, top_k = x.shape[1], w13.shape[1] // 2, topk_ids.shape[1]
    x, w13, w2 = x.contiguous(), w13.contiguous(), w2.contiguous()
    ids = topk_ids.reshape(-1)
    weights = topk_weights.reshape(-1).float()
    h = torch.empty(top_k, inter, dtype=x.dtype, device=x.device)
    _gate_up_gemv_kernel[(top_k, triton.cdiv(inter, tiles.gate_up_block_n))](
        x, w13, ids, h, inter, hidden, w13.stride(0), w13.stride(1),
        BLOCK_N=tiles.gate_up_block_n, BLOCK_K=tiles.block_k, EVEN_K=hidden % tiles.block_k == 0,
        num_warps=tiles.num_warps,
    )  # fmt: skip
    out = torch.empty(1, hidden, dtype=x.dtype, device=x.device)
    _down_gemv_kernel[(triton.cdiv(hidden, tiles.down_block_n),)](
        h, w2, ids, weights, out, hidden, inter, w2.stride(0), w2.stride(1),
        TOP_K=top_k, BLOCK_N=tiles.down_block_n, BLOCK_K=tiles.block_k, EVEN_K=inter % tiles.block_k == 0,
        num_warps=tiles.num_warps,
    )  # fmt: skip
    return out
