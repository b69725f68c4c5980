"""The weight formats a memory plan sizes, and how the engine builds each (memory_plan.py sizes them,
offload_plan.py sizes the layers --cpu-offload-gb moves in them)."""

from __future__ import annotations

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
