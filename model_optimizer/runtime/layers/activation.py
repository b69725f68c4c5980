"""Gated activation of the MLP: silu(gate) * up on a fused [gate | up] projection (one Triton
kernel on CUDA tensors, kernels/fused_ops.py; the eager function below elsewhere).

`ClampedSwigluAndMul`: gpt-oss's variant (gate clamped above at `limit`, up to [-limit, limit], then
(up + 1) * gate * sigmoid(alpha * gate)), on the same [gate | up] layout. gpt-oss uses it only inside its
experts, where the fused MoE kernel applies it in its gate_up GEMM's epilogue (kernels/fused_moe.py) and the
CPU path calls `ClampedSwiglu` (kernels/moe_reference.py); this module is that function on a fused row."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from model_optimizer.runtime.kernels.moe_reference import ClampedSwiglu
from model_optimizer.runtime.layers.fusion import fused


@fused("silu_and_mul")
def silu_and_mul(gate_up: torch.Tensor) -> torch.Tensor:
    gate, up = gate_up.chunk(2, dim=-1)
    return F.silu(gate) * up


class SiluAndMul(nn.Module):
    def forward(self, gate_up: torch.Tensor) -> torch.Tensor:
        return silu_and_mul(gate_up)


class ClampedSwigluAndMul(nn.Module):
    """gpt-oss's clamped SwiGLU of a [gate | up] row (see the module docstring)."""

    def __init__(self, alpha: float = 1.702, limit: float = 7.0) -> None:
        super().__init__()
        self.fn = ClampedSwiglu(alpha, limit)

    def forward(self, gate_up: torch.Tensor) -> torch.Tensor:
        gate, up = gate_up.chunk(2, dim=-1)
        return self.fn(gate, up)
