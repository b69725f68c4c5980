"""Softmax top-k routing of a mixture-of-experts in one Triton launch (the reference: layers/moe.py `softmax_topk`).

In torch the routing of a decode step is six kernels per layer (the logits cast to float32, softmax,
topk's gather and its sort, the sum and the division of the renormalization), about 15 us per layer
at one token on an H200, which is more than the layer's expert GEMMs take. Here one program per
token row loads the logits of every expert (experts <= MAX_EXPERTS, one block), takes the softmax
in float32, then k times the largest remaining weight (ties to the lowest expert id) and masks it
out, so the weights come in descending order as torch.topk gives them; with `renormalize` it
divides them by their sum. It writes float32 weights and int64 ids, the router's contract.

The router's matvec stays a separate GEMV at most token counts: one program per token would read the
whole router weight (experts x hidden) from one SM, slower than the GEMV spread over the GPU.

At a decode step of a few tokens `norm_route` runs the layer's post-attention RMSNorm (with its
residual add), the router's matvec and this routing as one launch: at one token on an H200 those
are three launches of ~2 us each for a few KB of work (Qwen3-30B-A3B: 48 layers). Programs split the
experts into tiles and the hidden dimension into slices; each computes the row's RMS from the whole
row (a few KB, read from L2), normalizes its slice, and writes its partial logits; the last program
of a row to finish (an atomic count) adds the slices in order, rounds the logits to the model dtype
as the separate matvec returns them, and routes. The normalized row and the residual sum come out as
from `add_rms_norm`, for the experts.
"""

from __future__ import annotations

import functools
import os
from dataclasses import dataclass

import torch
import triton
import triton.language as tl

from model_optimizer.runtime.kernels.counters import Counters
from model_optimizer.runtime.kernels.fused_ops import round_to

MAX_EXPERTS = 256
"""Experts that fit one program's block; more take the torch path."""
MAX_NORM_ROUTE_ROWS = 4
"""Token rows up to which `norm_route` fuses the norm and the matvec (beyond, the GEMV's own tiles win)."""
MAX_NORM_ROUTE_HIDDEN = 16384
"""Widest row `norm_route` holds in one program for its RMS."""
ROUTE_TILES_ENV = "MOPT_NORM_ROUTE_TILES"
""""BLOCK_E,SPLITS,NUM_WARPS" in place of `default_route_tiles` (measuring a candidate end to end)."""

_counters = Counters(MAX_NORM_ROUTE_ROWS)


@dataclass(frozen=True)
class RouteTiles:
    """Launch shape of `norm_route`: what benchmarks/norm_route.py sweeps."""

    block_e: int
    """Experts per program (a power of two)."""
    splits: int
    """Slices of the hidden dimension (programs per expert tile), each a power of two wide."""
    num_warps: int

    @classmethod
    def parse(cls, value: str) -> RouteTiles:
        """From "BLOCK_E,SPLITS,NUM_WARPS" (ROUTE_TILES_ENV)."""
        try:
            block_e, splits, warps = (int(v) for v in value.split(","))
        except ValueError:
            raise ValueError(f"{ROUTE_TILES_ENV} must be BLOCK_E,SPLITS,NUM_WARPS, got {value!r}") from None
        return cls(block_e, splits, warps)


@triton.jit
def _top_k(logits, experts, real, EXPERTS_PAD: tl.constexpr, TOP_K: tl.constexpr, K_PAD: tl.constexpr,
           RENORMALIZE: tl.constexpr):  # fmt: skip
    """(weights (K_PAD,), ids (K_PAD,) int32) of one row of float32 logits (-inf where not `real`):
    softmax, then TOP_K rounds of argmax-and-mask (ties to the lowest id), optionally renormalized."""
    exp = tl.exp(logits - tl.max(logits, axis=0))  # padding: exp(-inf) = 0
    probs = exp / tl.sum(exp, axis=0)
    remaining = tl.where(real, probs, -1.0)  # probabilities are >= 0: -1 is padding or already taken
    slots = tl.arange(0, K_PAD)
    top_w = tl.zeros((K_PAD,), dtype=tl.float32)
    top_i = tl.zeros((K_PAD,), dtype=tl.int32)
    for k in tl.static_range(TOP_K):
        best = tl.max(remaining, axis=0)
        # the lowest id holding the best weight (EXPERTS_PAD when a NaN row matches nothing: dropped later)
        pick = tl.min(tl.where(remaining == best, experts, EXPERTS_PAD), axis=0)
        top_w = tl.where(slots == k, best, top_w)
        top_i = tl.where(slots == k, pick, top_i)
        remaining = tl.where(experts == pick, -1.0, remaining)
    if RENORMALIZE:
        top_w = top_w / tl.sum(top_w, axis=0)  # slots past TOP_K hold 0
    return top_w, top_i


@triton.jit
def _softmax_topk_kernel(
    logits_ptr,
    weights_ptr,
    ids_ptr,
    stride_row,
    NUM_EXPERTS: tl.constexpr,
    EXPERTS_PAD: tl.constexpr,
    TOP_K: tl.constexpr,
    K_PAD: tl.constexpr,
    RENORMALIZE: tl.constexpr,
):
    """One token row: softmax over the experts in float32, then TOP_K rounds of argmax-and-mask."""
    row = tl.program_id(0).to(tl.int64)
    experts = tl.arange(0, EXPERTS_PAD)
    real = experts < NUM_EXPERTS
    logits = tl.load(logits_ptr + row * stride_row + experts, mask=real, other=float("-inf")).to(tl.float32)
    top_w, top_i = _top_k(logits, experts, real, EXPERTS_PAD, TOP_K, K_PAD, RENORMALIZE)
    slots = tl.arange(0, K_PAD)
    out = row * TOP_K + slots
    tl.store(weights_ptr + out, top_w, mask=slots < TOP_K)
    tl.store(ids_ptr + out, top_i.to(tl.int64), mask=slots < TOP_K)


@triton.jit
def _norm_route_kernel(
    x_ptr,
    residual_ptr,
    norm_w_ptr,
    normed_ptr,
    total_ptr,
    router_ptr,
    part_ptr,
    count_ptr,
    weights_ptr,
    ids_ptr,
    eps,
    HIDDEN: tl.constexpr,
    H_PAD: tl.constexpr,
    NUM_EXPERTS: tl.constexpr,
    EXPERTS_PAD: tl.constexpr,
    TOP_K: tl.constexpr,
    K_PAD: tl.constexpr,
    RENORMALIZE: tl.constexpr,
    NUM_SPLITS: tl.constexpr,
    BLOCK_E: tl.constexpr,
    SLICE: tl.constexpr,
):
    """Program (row, expert tile, hidden slice of SLICE columns): see the module docstring. Rows are
    contiguous. The router's tile is loaded first: its trip to memory overlaps the row's statistics."""
    row = tl.program_id(0).to(tl.int64)
    tile = tl.program_id(1)
    split = tl.program_id(2)
    dtype = x_ptr.dtype.element_ty
    experts = tile * BLOCK_E + tl.arange(0, BLOCK_E)
    e_ok = experts < NUM_EXPERTS
    ks = split * SLICE + tl.arange(0, SLICE)
    k_ok = ks < HIDDEN
    gate = tl.load(router_ptr + experts[:, None] * HIDDEN + ks[None, :], mask=e_ok[:, None] & k_ok[None, :], other=0.0)
    cols = tl.arange(0, H_PAD)
    whole = cols < HIDDEN
    total = round_to(
        tl.load(x_ptr + row * HIDDEN + cols, mask=whole, other=0.0).to(tl.float32)
        + tl.load(residual_ptr + row * HIDDEN + cols, mask=whole, other=0.0).to(tl.float32),
        dtype,
    ).to(tl.float32)  # the residual sum in the model dtype, as add_rms_norm
    inv = tl.rsqrt(tl.sum(total * total, axis=0) / HIDDEN + eps)
    s = round_to(
        tl.load(x_ptr + row * HIDDEN + ks, mask=k_ok, other=0.0).to(tl.float32)
        + tl.load(residual_ptr + row * HIDDEN + ks, mask=k_ok, other=0.0).to(tl.float32),
        dtype,
    )
    w = tl.load(norm_w_ptr + ks, mask=k_ok, other=0.0).to(tl.float32)
    normed = round_to(w * round_to(s.to(tl.float32) * inv, dtype).to(tl.float32), dtype)
    if tile == 0:  # the first tile's programs write the row's slices for the experts and the next layer
        tl.store(total_ptr + row * HIDDEN + ks, s, mask=k_ok)
        tl.store(normed_ptr + row * HIDDEN + ks, normed, mask=k_ok)
    acc = tl.sum(gate.to(tl.float32) * normed.to(tl.float32)[None, :], axis=1)
    tl.store(part_ptr + (row * NUM_SPLITS + split) * EXPERTS_PAD + experts, acc, mask=e_ok)
    tl.debug_barrier()  # every thread's partial is stored before this program reports in
    programs = tl.num_programs(1) * NUM_SPLITS
    if tl.atomic_add(count_ptr + row, 1, sem="acq_rel") == programs - 1:  # the row's last program routes
        every = tl.arange(0, EXPERTS_PAD)
        real = every < NUM_EXPERTS
        logits = tl.zeros((EXPERTS_PAD,), dtype=tl.float32)
        for part in tl.static_range(NUM_SPLITS):  # fixed order: the same sum on every run
            logits += tl.load(part_ptr + (row * NUM_SPLITS + part) * EXPERTS_PAD + every, mask=real, other=0.0,
                              cache_modifier=".cg")  # fmt: skip
        logits = tl.where(real, round_to(logits, dtype).to(tl.float32), float("-inf"))  # logits in the model dtype
        top_w, top_i = _top_k(logits, every, real, EXPERTS_PAD, TOP_K, K_PAD, RENORMALIZE)
        slots = tl.arange(0, K_PAD)
        tl.store(weights_ptr + row * TOP_K + slots, top_w, mask=slots < TOP_K)
        tl.store(ids_ptr + row * TOP_K + slots, top_i.to(tl.int64), mask=slots < TOP_K)
        tl.atomic_xchg(count_ptr + row, 0)  # ready for the next launch (CUDA-graph replays included)


def softmax_topk_kernel(logits: torch.Tensor, top_k: int, renormalize: bool) -> tuple[torch.Tensor, torch.Tensor]:
    """`softmax_topk` in one launch: (weights float32, ids int64), each (tokens, top_k). Ties go to the
    lowest expert id (torch.topk leaves their order unspecified). Needs 1 <= top_k <= experts <= MAX_EXPERTS."""
    num_tokens, num_experts = logits.shape
    if not 0 < top_k <= num_experts <= MAX_EXPERTS:
        raise ValueError(
            f"the routing kernel needs 1 <= top_k <= experts <= {MAX_EXPERTS}, got {top_k} of {num_experts}"
        )
    if logits.stride(-1) != 1:
        logits = logits.contiguous()
    weights = torch.empty(num_tokens, top_k, dtype=torch.float32, device=logits.device)
    ids = torch.empty(num_tokens, top_k, dtype=torch.int64, device=logits.device)
    if num_tokens:
        _softmax_topk_kernel[(num_tokens,)](
            logits,
            weights,
            ids,
            logits.stride(0),
            NUM_EXPERTS=num_experts,
            EXPERTS_PAD=triton.next_power_of_2(num_experts),
            TOP_K=top_k,
            K_PAD=triton.next_power_of_2(top_k),
            RENORMALIZE=renormalize,
            num_warps=1,  # 256 experts are 8 per lane: one warp reduces without shared memory
        )
    return weights, ids


def supports_norm_route(
    x: torch.Tensor, residual: torch.Tensor, norm_weight: torch.Tensor, router_weight: torch.Tensor, top_k: int
) -> bool:
    """Whether `norm_route` takes these: a few contiguous bf16/fp16 rows, the norm and router weights in
    their dtype, 1 <= top_k <= experts <= MAX_EXPERTS, a row of at most MAX_NORM_ROUTE_HIDDEN."""
    num_experts = router_weight.shape[0]
    return (
        x.dim() == 2
        and 0 < x.shape[0] <= MAX_NORM_ROUTE_ROWS
        and 0 < x.shape[1] <= MAX_NORM_ROUTE_HIDDEN
        and x.dtype in (torch.bfloat16, torch.float16)
        and residual.shape == x.shape
        and all(t.dtype == x.dtype and t.is_contiguous() for t in (x, residual, norm_weight, router_weight))
        and norm_weight.shape == (x.shape[1],)
        and router_weight.shape == (num_experts, x.shape[1])
        and 0 < top_k <= num_experts <= MAX_EXPERTS
    )


def norm_route(
    x: torch.Tensor,
    residual: torch.Tensor,
    norm_weight: torch.Tensor,
    eps: float,
    router_weight: torch.Tensor,
    top_k: int,
    renormalize: bool,
    tiles: RouteTiles | None = None,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor] | None:
    """(normed, x + residual, weights float32, ids int64) as `add_rms_norm` then the router's matvec in the
    model dtype then `softmax_topk_kernel`, in one launch (module docstring); None where it does not
    apply (`supports_norm_route`, or a CUDA-graph capture before any launch made the counters).
    `tiles` overrides the launch shape (benchmarks, tests)."""
    if not supports_norm_route(x, residual, norm_weight, router_weight, top_k):
        return None
    counters = _counters.get(x.device, MAX_NORM_ROUTE_ROWS)
    if counters is None:
        return None
    rows, hidden = x.shape
    num_experts = router_weight.shape[0]
    experts_pad = triton.next_power_of_2(num_experts)
    tiles = tiles or default_route_tiles(hidden, num_experts, rows)
    slice_ = triton.next_power_of_2(triton.cdiv(hidden, tiles.splits))
    splits = triton.cdiv(hidden, slice_)  # no empty slices
    normed, total = torch.empty_like(x), torch.empty_like(x)
    partials = torch.empty(rows, splits, experts_pad, dtype=torch.float32, device=x.device)
    weights = torch.empty(rows, top_k, dtype=torch.float32, device=x.device)
    ids = torch.empty(rows, top_k, dtype=torch.int64, device=x.device)
    grid = (rows, triton.cdiv(num_experts, tiles.block_e), splits)
    _norm_route_kernel[grid](
        x,
        residual,
        norm_weight,
        normed,
        total,
        router_weight,
        partials,
        counters,
        weights,
        ids,
        eps,
        HIDDEN=hidden,
        H_PAD=triton.next_power_of_2(hidden),
        NUM_EXPERTS=num_experts,
        EXPERTS_PAD=experts_pad,
        TOP_K=top_k,
        K_PAD=triton.next_power_of_2(top_k),
        RENORMALIZE=renormalize,
        NUM_SPLITS=splits,
        BLOCK_E=tiles.block_e,
        SLICE=slice_,
        num_warps=tiles.num_warps,
    )
    return normed, total, weights, ids


@functools.cache
def default_route_tiles(hidden: int, num_experts: int, rows: int = 1) -> RouteTiles:
    """ROUTE_TILES_ENV if set, else what benchmarks/norm_route.py measured fastest on the H200 (README,
    "Fused mixture-of-experts kernel"): rows of 2048, one warp on slices of 256 (4 experts at one row,
    16 at more); wider rows (Mixtral, Qwen3-235B-A22B) four warps on 16 experts x a quarter row."""
    value = os.environ.get(ROUTE_TILES_ENV)
    if value:
        return RouteTiles.parse(value)
    if hidden > 2048:
        return RouteTiles(16, 4, 4)
    return RouteTiles(4, 8, 1) if rows == 1 else RouteTiles(16, 16, 1)
