"""A mixture of experts' output before its sum: each token's k weighted expert rows.

The fused MoE's last step adds each token's k rows (kernels/fused_moe.py `sum_over_k`); the very next
op of a decoder layer is the residual add and RMSNorm of the next layer (or the final norm). Handing
the rows on unsummed lets that norm add them in its own kernel (kernels/fused_ops.py
`add_rms_norm_rows`): one launch fewer per sparse layer, the same sums (float32 in k order, rounded
once to the model dtype). `RMSNorm` takes either a tensor or these rows; anything else asks `total()`.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class ExpertRows:
    rows: torch.Tensor
    """(tokens * top_k, hidden), each token's rows consecutive, already scaled by their routing weights."""
    top_k: int

    def total(self) -> torch.Tensor:
        """(tokens, hidden): the rows of each token summed."""
        from model_optimizer.runtime.kernels.fused_moe import sum_over_k  # needs Triton: GPU paths only

        return sum_over_k(self.rows, self.rows.shape[0] // self.top_k, self.top_k)
