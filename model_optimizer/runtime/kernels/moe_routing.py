"""Softmax top-k routing of a mixture-of-experts in one Triton launch (the reference: layers/moe.py `softmax_topk`).

In torch the routing of a decode step is six kernels per layer (the logits cast to float32, softmax,
topk's gather and its sort, the sum and the division of the renormalization), about 15 us per layer
at one token on an H200, which is more than the layer's expert GEMMs take. Here one program per
token row loads the logits of every expert (experts <= MAX_EXPERTS, one block), takes the softmax
in float32, then k times the largest remaining weight (ties to the lowest expert id) and masks it
out, so the weights come in descending order as torch.topk gives them; with `renormalize` it
divides them by their sum. It writes float32 weights and int64 ids, the router's contract.

The router's matvec stays a cuBLAS GEMV: one program per token would read the whole router weight
(experts x hidden) from one SM, slower than the GEMV spread over the GPU.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

MAX_EXPERTS = 256
"""Experts that fit one program's block; more take the torch path."""


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
    out = row * TOP_K + slots
    tl.store(weights_ptr + out, top_w, mask=slots < TOP_K)
    tl.store(ids_ptr + out, top_i.to(tl.int64), mask=slots < TOP_K)


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
