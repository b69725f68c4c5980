"""Rotary position embedding with a precomputed cos/sin table, including linear, Llama 3, YaRN and LongRoPE scaling.

A decoder layer hands its unrotated q and k to attention with a `Rotation` (what rotating them takes)
rather than rotating them itself: for this module's layout attention then rotates q and k and stores
K and V in the paged cache in one kernel (layers/attention.py, kernels/rotary.py `norm_rotate_store`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import torch
from torch import nn

from model_optimizer.runtime.kernels import aot, triton_kernel
from model_optimizer.runtime.layers.longrope_rotary import longrope_frequencies, longrope_settings
from model_optimizer.runtime.layers.norm import rms_norm
from model_optimizer.runtime.layers.yarn_rotary import check_yarn_factor, pretraining_length, yarn_frequencies

ROPE_TYPES = ("default", "linear", "llama3", "yarn")
"""The rope types the Llama-family layers read; Phi-3 reads its own (models/phi3.py: default and longrope)."""
YARN_KEYS = ("beta_fast", "beta_slow", "attention_factor", "mscale", "mscale_all_dim", "truncate")
"""YaRN's settings besides theta, factor and the pretraining length, as config.json names them."""


@dataclass
class RopeConfig:
    head_dim: int
    max_position: int
    theta: float = 10000.0
    rope_type: str = "default"
    factor: float = 1.0
    low_freq_factor: float = 1.0
    high_freq_factor: float = 4.0
    original_max_position: int | None = None
    """The pretraining context llama3, YaRN and LongRoPE scale from; None: max_position, as transformers takes it."""
    yarn: dict = field(default_factory=dict)
    """YaRN's other settings (YARN_KEYS) as config.json gives them: what yarn_rotary.yarn_frequencies reads."""
    longrope: dict = field(default_factory=dict)
    """LongRoPE's chosen factor list and attention factor (longrope_rotary.longrope_settings)."""

    @classmethod
    def from_hf(
        cls,
        hf: dict,
        head_dim: int,
        max_position: int,
        serve_len: int | None = None,
        rope_types: tuple[str, ...] = ROPE_TYPES,
    ) -> RopeConfig:
        """Read both the transformers 4 keys (rope_theta, rope_scaling) and 5 (rope_parameters). `serve_len`:
        the engine's max_model_len, which picks longrope's factor list (None: `max_position`, its default);
        `rope_types`: those the caller's model reads (ValueError for any other)."""
        params = dict(hf.get("rope_parameters") or {})
        params.update(hf.get("rope_scaling") or {})
        theta = params.get("rope_theta", hf.get("rope_theta", 10000.0))
        rope_type = params.get("rope_type", params.get("type", "default"))
        if rope_type not in rope_types:
            raise ValueError(f"rope_type {rope_type!r} is not supported; supported: {', '.join(rope_types)}")
        if rope_type == "yarn":
            check_yarn_factor(params)
        original = pretraining_length(hf, params, max_position)
        longrope = longrope_settings(params, original, max_position, serve_len) if rope_type == "longrope" else {}
        return cls(
            head_dim=head_dim,
            max_position=max_position,
            theta=float(theta),
            rope_type=rope_type,
            factor=float(params.get("factor", 1.0)),
            low_freq_factor=float(params.get("low_freq_factor", 1.0)),
            high_freq_factor=float(params.get("high_freq_factor", 4.0)),
            original_max_position=original,
            yarn={key: params[key] for key in YARN_KEYS if key in params},
            longrope=longrope,
        )


def inverse_frequencies(cfg: RopeConfig) -> tuple[torch.Tensor, float]:
    """(inverse frequencies (head_dim / 2,) float32, the factor cos and sin are multiplied by: YaRN's or
    LongRoPE's, else 1)."""
    original = cfg.original_max_position or cfg.max_position
    if cfg.rope_type == "yarn":
        params = cfg.yarn | {
            "rope_theta": cfg.theta,
            "factor": cfg.factor,
            "original_max_position_embeddings": original,
        }
        return yarn_frequencies(params, cfg.head_dim)
    if cfg.rope_type == "longrope":
        return longrope_frequencies(cfg.longrope, cfg.theta, cfg.head_dim)
    exponents = torch.arange(0, cfg.head_dim, 2, dtype=torch.int64).float() / cfg.head_dim
    inv_freq = 1.0 / (cfg.theta**exponents)
    if cfg.rope_type == "linear":
        return inv_freq / cfg.factor, 1.0
    if cfg.rope_type == "llama3":
        return _llama3_scale(inv_freq, cfg, original), 1.0
    return inv_freq, 1.0


def _llama3_scale(inv_freq: torch.Tensor, cfg: RopeConfig, original: int) -> torch.Tensor:
    """Long wavelengths are slowed by `factor`, short ones kept, the band between interpolated; `original` is
    the pretraining context the wavelengths are measured against."""
    wavelen = 2 * math.pi / inv_freq
    low_freq_wavelen = original / cfg.low_freq_factor
    high_freq_wavelen = original / cfg.high_freq_factor
    scaled = torch.where(wavelen > low_freq_wavelen, inv_freq / cfg.factor, inv_freq)
    smooth = (original / wavelen - cfg.low_freq_factor) / (cfg.high_freq_factor - cfg.low_freq_factor)
    between = (1 - smooth) * scaled / cfg.factor + smooth * scaled
    in_band = (wavelen >= high_freq_wavelen) & (wavelen <= low_freq_wavelen)
    return torch.where(in_band, between, scaled)


def angle_tables(cfg: RopeConfig) -> tuple[torch.Tensor, torch.Tensor]:
    """float32 cos and sin of every position's angles, (max_position, head_dim / 2): the rotary tables, times
    YaRN's or LongRoPE's attention factor as transformers scales them (so every path that reads the tables applies it)."""
    inv_freq, attention_factor = inverse_frequencies(cfg)
    freqs = torch.arange(cfg.max_position, dtype=torch.float32)[:, None] * inv_freq[None, :]
    return freqs.cos() * attention_factor, freqs.sin() * attention_factor


class RotaryEmbedding(nn.Module):
    """Llama's rotary (dimension i paired with i + head_dim / 2) from float32 cos/sin tables."""

    def __init__(self, cfg: RopeConfig) -> None:
        super().__init__()
        cos, sin = angle_tables(cfg)
        self.register_buffer("cos", cos, persistent=False)
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
        """Rotate q (tokens, heads, head_dim) and k (tokens, kv_heads, head_dim) by their positions,
        after a per-head RMSNorm when weights are given (Qwen3). One Triton kernel on the GPU."""
        kernel = triton_kernel("rotary", "norm_rotate") if aot.on_gpu(q) else None
        rotate = kernel or norm_rotate_ref
        return rotate(q, k, positions, self.cos, self.sin, q_weight, k_weight, eps)


@dataclass
class Rotation:
    """What rotating one layer's q and k takes, passed to attention beside the unrotated q and k, so that
    attention can rotate and store the keys in one kernel where `rotary` is a `RotaryEmbedding`."""

    rotary: nn.Module
    """A `RotaryEmbedding`, or any module called as rotary(positions, q, k) (GLM's PartialRotaryEmbedding,
    which the fused kernel does not cover: rotated by `apply`, then stored as usual)."""
    positions: torch.Tensor
    """(tokens,) position of each token."""
    q_weight: torch.Tensor | None = None
    """Per-head RMSNorm weights applied before rotating (Qwen3's q_norm and k_norm), or None."""
    k_weight: torch.Tensor | None = None
    eps: float = 1e-6

    def apply(self, q: torch.Tensor, k: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(q, k) rotated, by the module's own call: the path without a cache store in the same kernel."""
        if self.q_weight is None:
            return self.rotary(self.positions, q, k)
        return self.rotary(self.positions, q, k, self.q_weight, self.k_weight, self.eps)


def norm_rotate_ref(q, k, positions, cos_table, sin_table, q_weight=None, k_weight=None, eps: float = 1e-6):
    """The CPU path and the kernel's yardstick: transformers' arithmetic, op by op."""
    if q_weight is not None:
        q, k = rms_norm(q, q_weight, eps), rms_norm(k, k_weight, eps)
    cos = cos_table[positions].to(q.dtype)[:, None, :]  # (tokens, 1, head_dim / 2)
    sin = sin_table[positions].to(q.dtype)[:, None, :]
    return rotate_halves(q, cos, sin), rotate_halves(k, cos, sin)


def rotate_halves(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """`x` rotated with dimension i paired with i + width / 2 (Llama's layout): cos and sin of width / 2."""
    # same arithmetic as transformers' x * cos + rotate_half(x) * sin, on halves
    x1, x2 = x.chunk(2, dim=-1)
    return torch.cat((x1 * cos - x2 * sin, x2 * cos + x1 * sin), dim=-1)
