"""RMSNorm, computed in float32 like transformers, with the residual add folded in."""

from __future__ import annotations

import torch
from torch import nn


class RMSNorm(nn.Module):
    def __init__(self, hidden_size: int, eps: float = 1e-6) -> None:
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(hidden_size))

    def forward(self, x: torch.Tensor, residual: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        """Return (norm(x + residual), x + residual); the sum is the next residual."""
        if residual is not None:
            x = x + residual  # in the model dtype, as transformers adds
        return self._norm(x), x

    def norm(self, x: torch.Tensor) -> torch.Tensor:
        return self._norm(x)

    def _norm(self, x: torch.Tensor) -> torch.Tensor:
        dtype = x.dtype
        h = x.float()
        h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + self.eps)
        return self.weight * h.to(dtype)
