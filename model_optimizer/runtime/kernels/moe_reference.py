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

gpt-oss's experts (models/gpt_oss.py): biases `w13_bias` (experts, 2 * intermediate: gate then up, as w13's
rows) and `w2_bias` (experts, hidden), added after each projection, and `activation` a `ClampedSwiglu` in
place of silu(gate) * up, as transformers' GptOssExperts computes them (its interleaved gate/up columns are
split into w13's [gate | up] rows at load).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F


@dataclass(frozen=True)
class ClampedSwiglu:
    """gpt-oss's expert activation (transformers' GptOssExperts._apply_gate): the gate clamped above at `limit`,
    the up projection to [-limit, limit], then (up + 1) * gate * sigmoid(alpha * gate)."""

    alpha: float = 1.702
    limit: float = 7.0

    def __call__(self, gate: torch.Tensor, up: torch.Tensor) -> torch.Tensor:
        gate = gate.clamp(min=None, max=self.limit)
        up = up.clamp(min=-self.limit, max=self.limit)
        glu = gate * torch.sigmoid(gate * self.alpha)
        return (up + 1) * glu


def fused_moe_ref(
    x: torch.Tensor,
    w13: torch.Tensor,
    w2: torch.Tensor,
    topk_weights: torch.Tensor,
    topk_ids: torch.Tensor,
    w13_bias: torch.Tensor | None = None,
    w2_bias: torch.Tensor | None = None,
    activation: ClampedSwiglu | None = None,
) -> torch.Tensor:
    """sum over k of topk_weights[t, k] * expert_{topk_ids[t, k]}(x[t]) -> (tokens, hidden) in x.dtype.
    Biases and `activation` (None: silu(gate) * up): see the module docstring."""
    num_experts, intermediate = w13.shape[0], w13.shape[1] // 2
    out = torch.zeros_like(x)
    ids = topk_ids.long()
    for expert in ids[(ids >= 0) & (ids < num_experts)].unique().tolist():  # sorted ascending
        token_idx, slot = torch.where(ids == expert)
        gate_up = F.linear(x[token_idx], w13[expert])
        if w13_bias is not None:
            gate_up = gate_up + w13_bias[expert]
        gate, up = gate_up.split(intermediate, dim=-1)
        h = F.linear(F.silu(gate) * up if activation is None else activation(gate, up), w2[expert])
        if w2_bias is not None:
            h = h + w2_bias[expert]  # (tokens of this expert, hidden)
        h = h * topk_weights[token_idx, slot, None].to(h.dtype)
        out.index_add_(0, token_idx, h)
    return out
