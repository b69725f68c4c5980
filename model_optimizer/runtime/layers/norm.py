"""RMSNorm, computed in float32 like transformers, with the residual add folded in.

On CUDA tensors one Triton kernel each (kernels/fused_ops.py); these eager functions are the CPU
path and the kernels' yardstick."""

from __future__ import annotations

import torch
from torch import nn

from model_optimizer.runtime.kernels import triton_kernel
from model_optimizer.runtime.layers.expert_rows import ExpertRows
from model_optimizer.runtime.layers.fusion import fused


def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    dtype = x.dtype
    h = x.float()
    h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + eps)
    return weight * h.to(dtype)


@fused("rms_norm")
def _rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    return rms_norm(x, weight, eps)


@fused("add_rms_norm")
def _add_rms_norm(
    x: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor, eps: float
) -> tuple[torch.Tensor, torch.Tensor]:
    x = x + residual  # in the model dtype, as transformers adds
    return rms_norm(x, weight, eps), x


class RMSNorm(nn.Module):
    def __init__(self, hidden_size: int, eps: float = 1e-6) -> None:
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(hidden_size))

    def forward(
        self, x: torch.Tensor | ExpertRows, residual: torch.Tensor | None = None
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Return (norm(x + residual), x + residual); the sum is the next residual. x may be a mixture of
        experts' unsummed rows (layers/expert_rows.py), added in this norm's kernel."""
        if isinstance(x, ExpertRows):
            if residual is None:
                x = x.total()
            else:
                return triton_kernel("fused_ops", "add_rms_norm_rows")(x.rows, x.top_k, residual, self.weight, self.eps)
        if residual is None:
            return _rms_norm(x, self.weight, self.eps), x
        return _add_rms_norm(x, residual, self.weight, self.eps)
