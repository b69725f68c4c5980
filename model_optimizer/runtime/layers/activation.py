"""Gated activation of the MLP: silu(gate) * up on a fused [gate | up] projection (one Triton
kernel on CUDA tensors, kernels/fused_ops.py; the eager function below elsewhere)."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from model_optimizer.runtime.layers.fusion import fused


@fused("silu_and_mul")
def silu_and_mul(gate_up: torch.Tensor) -> torch.Tensor:
    gate, up = gate_up.chunk(2, dim=-1)
    return F.silu(gate) * up


class SiluAndMul(nn.Module):
    def forward(self, gate_up: torch.Tensor) -> torch.Tensor:
        return silu_and_mul(gate_up)
