"""The weight formats a memory plan sizes, and how the engine builds each (memory_plan.py sizes them,
offload_plan.py sizes the layers --cpu-offload-gb moves in them)."""

from __future__ import annotations

import json
from functools import lru_cache
from typing import Any

from model_optimizer.runtime.layers.quantization.spec import QuantSpec, resolve_spec

QUANT_FORMATS: dict[str, tuple[float, str]] = {
    "fp8": (1.0, "fp8"),
    "int8": (1.0, "int8"),
    "int4": (0.5, "rtn-int4"),
}
"""Format -> (bytes per linear-layer weight, the method that rounds a float checkpoint to it at load).
Beside the codes the engine keeps (layers/quantization/method.py) one float32 scale per output row
(fp8, int8) or, per group of inputs of each row, a scale in the model dtype and a uint8 zero point
(int4). Embedding, lm_head and norms stay in the model dtype."""


def checkpoint_spec(config: dict) -> QuantSpec | None:
    """How the engine reads a pre-quantized checkpoint (its own resolve_spec, no --quantization); None
    for float weights. ValueError for a quantization_config it cannot read."""
    return resolve_spec(config, None)


def format_spec(config: dict, weight_format: str) -> QuantSpec | None:
    """How the engine builds the plan's `weight_format`: a pre-quantized checkpoint's own spec; for a
    float one the method that rounds it at load (QUANT_FORMATS), or None for its own dtype."""
    spec = checkpoint_spec(config)
    if spec is not None or weight_format not in QUANT_FORMATS:
        return spec
    return QuantSpec(QUANT_FORMATS[weight_format][1])


def refused_format(
    config: dict, weight_format: str, dtype_name: str, tensor_parallel_size: int = 1, expert_parallel: bool = False
) -> str | None:
    """Why the engine would not round a float checkpoint to `weight_format` at load, in `dtype_name` and
    split so (attach_quantization's ValueError on a meta copy of the model: int4's groups must tile every
    layer's inputs, which DeepSeek-V2-Lite's dense 10,944-wide MLP does not); None when it would. Cached
    per config and settings: a tensor-parallel search plans the same model many times."""
    config_json = json.dumps(config, sort_keys=True)
    return _refusal(config_json, weight_format, dtype_name, tensor_parallel_size, expert_parallel)


@lru_cache(maxsize=64)
def _refusal(
    config_json: str, weight_format: str, dtype_name: str, tensor_parallel_size: int, expert_parallel: bool
) -> str | None:
    try:
        quantized_meta_model(json.loads(config_json), weight_format, dtype_name, tensor_parallel_size, expert_parallel)
    except ValueError as exc:
        return str(exc)
    return None


def quantized_meta_model(
    config: dict, weight_format: str, dtype_name: str, tensor_parallel_size: int = 1, expert_parallel: bool = False
) -> Any:
    """The engine's model of `config` on the meta device, in `weight_format` as the engine builds it
    (format_spec, then the engine's own attach_quantization); ValueError where the engine refuses it.
    Float weights are the shared cached model, quantized ones a copy (attaching edits it)."""
    import torch

    from model_optimizer.model.inspect.consumption import build_meta_model, private_meta_model
    from model_optimizer.runtime.layers.quantization.attach import attach_quantization

    spec = format_spec(config, weight_format)
    as_planned = (config, dtype_name, tensor_parallel_size, expert_parallel)
    model = build_meta_model(*as_planned) if spec is None else private_meta_model(*as_planned)
    attach_quantization(model, spec, getattr(torch, dtype_name), dummy=True)
    return model
