"""Rotary embedding of multi-head latent attention's rope parts, with DeepSeek's YaRN scaling.

DeepSeek-V2/V3 rotate only `qk_rope_head_dim` values of each query head and the one shared rope key.
Their checkpoints hold those values as interleaved pairs (x0, x1), (x2, x3), ... (V2 always; V3 unless
`rope_interleave` is false, then as two halves like Llama). Either way the rotated vector comes out as
two halves [x_even rotated | x_odd rotated]: a fixed permutation of the pair layout, applied to queries
and keys alike, so their dot products, and what the cache holds for the keys, are consistent.

YaRN (`rope_type` / `type` "yarn"), as transformers and DeepSeek compute it (layers/rotary.py takes the same
frequencies and attention factor for the Llama-family layers: Qwen2/Qwen3's long-context setting):
- frequencies between a fast and a slow band (`beta_fast`, `beta_slow`, in rotations over
  `original_max_position_embeddings`) are blended from extrapolated (1 / theta^(2i/d)) and interpolated
  (that / factor) ones by a linear ramp over the dimension index, its ends rounded outwards;
- cos and sin are multiplied by the attention factor: `attention_factor` when set, else
  mscale(factor, mscale) / mscale(factor, mscale_all_dim) with mscale(s, m) = 0.1 m ln(s) + 1
  (1 for DeepSeek, whose two are equal), else mscale(factor, 1);
- the softmax scale qk_head_dim^-0.5 is multiplied by mscale(factor, mscale_all_dim)^2 when
  `mscale_all_dim` is set (`softmax_scale`): the correction longer contexts need.
"""

from __future__ import annotations

import math

import torch
from torch import nn

ROPE_TYPES = ("default", "yarn")


def rope_parameters(hf: dict) -> dict:
    """The rope settings of config.json under either spelling (transformers 5 `rope_parameters`, older
    `rope_scaling` beside `rope_theta`), with `rope_type` filled in; ValueError for a type not built here."""
    params = dict(hf.get("rope_parameters") or {})
    params.update(hf.get("rope_scaling") or {})
    params.setdefault("rope_theta", hf.get("rope_theta", 10000.0))
    params["rope_type"] = params.get("rope_type", params.get("type", "default"))
    if params["rope_type"] not in ROPE_TYPES:
        raise ValueError(
            f"rope_type {params['rope_type']!r} is not supported for multi-head latent attention; "
            f"supported: {', '.join(ROPE_TYPES)}"
        )
    if params["rope_type"] == "yarn":
        check_yarn_factor(params)
        params["original_max_position_embeddings"] = pretraining_length(
            hf, params, hf.get("max_position_embeddings") or 4096
        )
    return params


def check_yarn_factor(params: dict) -> None:
    """ValueError unless YaRN's `factor` is a positive number."""
    factor = params.get("factor")
    if isinstance(factor, bool) or not isinstance(factor, (int, float)) or factor <= 0:
        raise ValueError(f"config.json: yarn rope needs a positive 'factor', got {factor!r}")


def pretraining_length(hf: dict, params: dict, max_position: int) -> int:
    """The context length llama3 and YaRN scale from, where transformers looks for it: a top-level
    `original_max_position_embeddings` (Phi-3's place) before the rope settings' own, else `max_position`."""
    return int(
        hf.get("original_max_position_embeddings") or params.get("original_max_position_embeddings") or max_position
    )


def yarn_mscale(scale: float, mscale: float = 1.0) -> float:
    return 1.0 if scale <= 1 else 0.1 * mscale * math.log(scale) + 1.0


def softmax_scale(hf: dict, qk_head_dim: int) -> float:
    """qk_head_dim^-0.5, times mscale(factor, mscale_all_dim)^2 under YaRN with `mscale_all_dim` set."""
    params = rope_parameters(hf)
    scale = qk_head_dim**-0.5
    if params["rope_type"] != "default" and params.get("mscale_all_dim"):
        mscale = yarn_mscale(float(params["factor"]), float(params["mscale_all_dim"]))
        scale = scale * mscale * mscale
    return scale


def yarn_frequencies(params: dict, dim: int) -> tuple[torch.Tensor, float]:
    """(inverse frequencies (dim / 2,) float32, attention factor) of YaRN; see the module docstring."""
    base, factor = float(params["rope_theta"]), float(params["factor"])
    original = int(params["original_max_position_embeddings"])
    beta_fast, beta_slow = params.get("beta_fast") or 32, params.get("beta_slow") or 1
    factor_attn = params.get("attention_factor")
    if factor_attn is None:
        mscale, mscale_all_dim = params.get("mscale"), params.get("mscale_all_dim")
        if mscale and mscale_all_dim:
            factor_attn = yarn_mscale(factor, mscale) / yarn_mscale(factor, mscale_all_dim)
        else:
            factor_attn = yarn_mscale(factor)

    def correction_dim(rotations: float) -> float:  # the dimension index that turns `rotations` times
        return dim * math.log(original / (rotations * 2 * math.pi)) / (2 * math.log(base))

    low, high = correction_dim(beta_fast), correction_dim(beta_slow)
    if params.get("truncate", True):
        low, high = math.floor(low), math.ceil(high)
    low, high = max(low, 0), min(high, dim - 1)
    if low == high:
        high += 0.001  # a ramp of one point would divide by zero
    ramp = ((torch.arange(dim // 2, dtype=torch.float32) - low) / (high - low)).clamp(0, 1)
    powers = base ** (torch.arange(0, dim, 2, dtype=torch.float32) / dim)
    extrapolated, interpolated = 1.0 / powers, 1.0 / (factor * powers)
    keep = 1 - ramp  # share of the extrapolated frequency
    return interpolated * (1 - keep) + extrapolated * keep, float(factor_attn)


class LatentRotary(nn.Module):
    """cos/sin tables (max_position, dim / 2), already times the attention factor, and the rotation."""

    def __init__(self, hf: dict, dim: int, max_position: int) -> None:
        super().__init__()
        params = rope_parameters(hf)
        if params["rope_type"] == "yarn":
            inv_freq, factor = yarn_frequencies(params, dim)
        else:
            inv_freq = 1.0 / float(params["rope_theta"]) ** (torch.arange(0, dim, 2, dtype=torch.float32) / dim)
            factor = 1.0
        arch = (hf.get("architectures") or [""])[0]
        self.interleaved = arch == "DeepseekV2ForCausalLM" or bool(hf.get("rope_interleave", True))
        """Input pairs (x0, x1), (x2, x3) rather than halves (V3 with rope_interleave false)."""
        freqs = torch.arange(max_position, dtype=torch.float32)[:, None] * inv_freq[None, :]
        self.register_buffer("cos", freqs.cos() * factor, persistent=False)
        self.register_buffer("sin", freqs.sin() * factor, persistent=False)

    def forward(self, positions: torch.Tensor, q: torch.Tensor, k: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """q (tokens, heads, dim) and k (tokens, 1, dim) rotated by their positions, in float32 arithmetic."""
        cos = self.cos[positions][:, None, :]  # (tokens, 1, dim / 2)
        sin = self.sin[positions][:, None, :]
        return self._rotate(q, cos, sin), self._rotate(k, cos, sin)

    def _rotate(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        h = x.float()
        x1, x2 = (h[..., 0::2], h[..., 1::2]) if self.interleaved else h.chunk(2, dim=-1)
        return torch.cat((x1 * cos - x2 * sin, x2 * cos + x1 * sin), dim=-1).to(x.dtype)
