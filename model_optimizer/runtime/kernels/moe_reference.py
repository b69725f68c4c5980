"""Pure-torch mixture-of-experts: the CPU path and the yardstick of the fused Triton kernel.

Layouts shared with kernels/fused_moe.py:
- `x` (tokens, hidden): the tokens' hidden states.
- `w13` (experts, 2 * intermediate, hidden): each expert's gate rows, then its up rows.
- `w2` (experts, hidden, intermediate): each expert's down projection.
- `topk_weights` float32 (tokens, top_k) and `topk_ids` integer (tokens, top_k): each token's experts
  and their weights. An id outside [0, experts) (-1) is an expert another rank holds (expert
  parallelism): it adds nothing here.

The loop follows transformers' eager experts op by op (one expert at a time in increasing order,
silu(gate) * up in the model dtype, down projection, routing weight, `index_add_` into the output),
so it does transformers' arithmetic in transformers' order.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F


def fused_moe_ref(
    x: torch.Tensor, w13: torch.Tensor, w2: torch.Tensor, topk_weights: torch.Tensor, topk_ids: torch.Tensor
) -> torch.Tensor:
    """sum over k of topk_weights[t, k] * expert_{topk_ids[t, k]}(x[t]) -> (tokens, hidden) in x.dtype."""
    num_experts, intermediate = w13.shape[0], w13.shape[1] // 2
    out = torch.zeros_like(x)
    ids = topk_ids.long()
    for expert in ids[(ids >= 0) & (ids < num_experts)].unique().tolist():  # sorted ascending
        token_idx, slot = torch.where(ids == expert)
        gate, up = F.linear(x[token_idx], w13[expert]).split(intermediate, dim=-1)
        h = F.linear(F.silu(gate) * up, w2[expert])  # (tokens of this expert, hidden)
        h = h * topk_weights[token_idx, slot, None].to(h.dtype)
        out.index_add_(0, token_idx, h)
    return out
