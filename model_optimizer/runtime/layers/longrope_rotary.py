"""LongRoPE scaling of the rotary frequencies (Phi-3-mini-128k, Phi-3.5-mini, Phi-4-mini; `rope_type` "longrope").

As transformers computes it (`_compute_longrope_parameters`):
- rotary frequency i of a `dim`-wide rotation is 1 / (f_i x theta^(2i / dim)), with f the `short_factor` or the
  `long_factor` list (dim / 2 numbers each);
- cos and sin are multiplied by the attention factor: `attention_factor` when set, else from the scale s
  (`factor` when set, else max_position_embeddings / original_max_position_embeddings): 1 when s <= 1, else
  sqrt(1 + ln s / ln original_max_position_embeddings).

Which list, the one place this engine departs from transformers: a paged KV cache keeps every key rotated as it
was stored, so one list must serve a sequence from its first token to its last. The list is chosen once, from
the longest sequence the engine serves (`serve_len`: max_model_len, by default the model's context): the short
factors when it fits in original_max_position_embeddings, the long ones for every position otherwise.
- transformers picks per forward pass by the sequence's own length (short up to the original length, long
  beyond it, recomputing the whole cache once a sequence crosses it): identical to this rule whenever
  max_model_len is within the original length, and for every sequence longer than it; with a longer
  max_model_len, a sequence that stays within the original length gets the long factors here, the short
  ones there.
- vLLM takes the same rule as this one (long factors everywhere once max_model_len passes the original length).
"""

from __future__ import annotations

import math

import torch

FACTOR_LISTS = ("short_factor", "long_factor")


def longrope_settings(params: dict, original: int, max_position: int, serve_len: int | None) -> dict:
    """What longrope_frequencies needs from the rope settings `params` (config.json's rope_scaling /
    rope_parameters): {"factors": the chosen list, "attention_factor": float}. `original`: the pretraining
    length; `max_position`: the model's context; `serve_len`: the engine's max_model_len (None: max_position).
    ValueError for factor lists that are not lists of positive numbers, a scale that is not a positive number,
    or a pretraining length under 2 (its logarithm divides)."""
    if original < 2:
        raise ValueError(f"config.json: longrope needs original_max_position_embeddings of 2 or more, got {original}")
    for key in FACTOR_LISTS:
        values = params.get(key)
        if not isinstance(values, list) or not values or not all(_positive(v) for v in values):
            raise ValueError(f"config.json: longrope needs {key!r} as a list of positive numbers, got {values!r}")
    for key in ("factor", "attention_factor"):
        if params.get(key) is not None and not _positive(params[key]):
            raise ValueError(f"config.json: longrope's {key!r} must be a positive number, got {params[key]!r}")
    scale = params.get("factor") or max_position / original
    attention_factor = params.get("attention_factor")
    if attention_factor is None:
        attention_factor = 1.0 if scale <= 1 else math.sqrt(1 + math.log(scale) / math.log(original))
    long = (serve_len or max_position) > original
    chosen = params["long_factor" if long else "short_factor"]
    return {"factors": [float(v) for v in chosen], "attention_factor": float(attention_factor)}


def longrope_frequencies(settings: dict, theta: float, dim: int) -> tuple[torch.Tensor, float]:
    """(inverse frequencies (dim / 2,) float32, attention factor) of a `dim`-wide rotation; ValueError when the
    chosen factor list does not have dim / 2 numbers."""
    factors = torch.tensor(settings["factors"], dtype=torch.float32)
    if factors.numel() != dim // 2:
        raise ValueError(
            f"config.json: longrope's factor lists must have {dim // 2} numbers (half the rotated width {dim}), "
            f"got {factors.numel()}"
        )
    exponents = torch.arange(0, dim, 2, dtype=torch.int64).float() / dim
    return 1.0 / (factors * theta**exponents), settings["attention_factor"]


def _positive(value: object) -> bool:
    return not isinstance(value, bool) and isinstance(value, (int, float)) and value > 0
