"""Rotary position embedding on the first `rotary_dim` dimensions of each head (GLM).

GLM-4 rotates only part of each head (`partial_rotary_factor`, 0.5 in its checkpoints) and pairs
dimension 2i with 2i + 1 (GPT-J's layout, `interleaved`), where Llama pairs i with i + head_dim / 2;
GLM-4.5 (MoE) rotates part of each head too, in Llama's halves. The rest of the head passes through
unchanged. Same call as layers/rotary.RotaryEmbedding (q/k RMSNorm weights included), in torch ops on
every device (the Triton rotary kernel knows only whole heads).
"""

from __future__ import annotations

from dataclasses import replace

import torch
from torch import nn

from model_optimizer.runtime.layers.norm import rms_norm
from model_optimizer.runtime.layers.rotary import RopeConfig, angle_tables, rotate_halves


class PartialRotaryEmbedding(nn.Module):
    def __init__(self, cfg: RopeConfig, rotary_dim: int, interleaved: bool = True) -> None:
        """`cfg.head_dim` is ignored: the frequencies are those of a `rotary_dim`-wide head. `interleaved`:
        GLM-4's pairs (2i, 2i + 1); else Llama's halves (i, i + rotary_dim / 2)."""
        super().__init__()
        if rotary_dim % 2 or rotary_dim <= 0:
            raise ValueError(f"the rotary part of a head must be a positive even width, got {rotary_dim}")
        self.rotary_dim = rotary_dim
        self.interleaved = interleaved
        cos, sin = angle_tables(replace(cfg, head_dim=rotary_dim))
        self.register_buffer("cos", cos, persistent=False)  # (max_position, rotary_dim / 2)
        self.register_buffer("sin", sin, persistent=False)

    def forward(
        self,
        positions: torch.Tensor,
        q: torch.Tensor,
        k: torch.Tensor,
        q_weight: torch.Tensor | None = None,
        k_weight: torch.Tensor | None = None,
        eps: float = 1e-6,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Rotate q (tokens, heads, head_dim) and k (tokens, kv_heads, head_dim) by their positions, after a
        per-head RMSNorm when weights are given (GLM-4.5's use_qk_norm)."""
        if q_weight is not None:
            q, k = rms_norm(q, q_weight, eps), rms_norm(k, k_weight, eps)
        cos = self.cos[positions].to(q.dtype)[:, None, :]  # (tokens, 1, rotary_dim / 2)
        sin = self.sin[positions].to(q.dtype)[:, None, :]
        return self._rotate(q, cos, sin), self._rotate(k, cos, sin)

    def _rotate(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        rot, rest = x[..., : self.rotary_dim], x[..., self.rotary_dim :]
        if not self.interleaved:
            return torch.cat((rotate_halves(rot, cos, sin), rest), dim=-1)
        even, odd = rot[..., 0::2], rot[..., 1::2]  # pair i: dimensions 2i and 2i + 1
        # transformers' x * cos + rotate_half(x) * sin on the interleaved pairs, term by term
        rotated = torch.stack((even * cos + (-odd) * sin, odd * cos + even * sin), dim=-1).flatten(-2)
        return torch.cat((rotated, rest), dim=-1)
