"""Findings about a quantized checkpoint, judged the way the loader reads it (layers/quantization/spec.py
and sources.py): a format the engine cannot read, a quantization_config over plain float weights,
integer tensors without one, or a quantized checkpoint that loads as it is."""

from __future__ import annotations

from model_optimizer.common.safetensors_dtypes import DTYPE_BYTES
from model_optimizer.environment.findings import Finding
from model_optimizer.model.inspect.context import InspectContext
from model_optimizer.model.inspect.headers import FLOAT_DTYPES


def quant_spec_error(ctx: InspectContext) -> str | None:
    """The loader's refusal of config.json's quantization_config, or None when it reads it (or there is none)."""
    from model_optimizer.runtime.layers.quantization.spec import resolve_spec

    try:
        resolve_spec(ctx.checkpoint.config, None)
    except ValueError as exc:
        return str(exc)
    return None


def quantization(ctx: InspectContext) -> list[Finding]:
    """A quantized checkpoint is judged the way the loader reads it (layers/quantization/spec.py, sources.py)."""
    qc = ctx.census.quantization_config
    skipped = set(ctx.raw_check.skipped)  # what the loader leaves unread (an encoder's int64 position_ids)
    non_float = sorted(
        {
            t.dtype
            for t in ctx.checkpoint.tensors
            if t.dtype not in FLOAT_DTYPES and t.dtype in DTYPE_BYTES and t.name not in skipped
        }  # an unknown code is rules_layout.dtype_codes' to report
    )
    if not qc:
        if non_float:
            return [
                Finding(
                    "quant.no_config",
                    "error",
                    f"integer tensors ({', '.join(non_float)}) but no quantization_config",
                    "Without quantization_config the loader would cast packed integers to floats as if they were values.",
                    {"any": ["Restore quantization_config in config.json from the quantization tool's output"]},
                )
            ]
        return []
    error = quant_spec_error(ctx)
    if error is not None:
        return [
            Finding(
                "quant.unsupported",
                "error",
                f"the engine cannot read this quantization: {error}",
                "The loader refuses the checkpoint at start-up.",
                {
                    "any": [
                        "Serve it with an engine that reads this format (vLLM reads most)",
                        "or quantize the float model: mopt quantize FLOAT_MODEL --method awq --output OUT",
                    ]
                },
                {"quantization_config": qc},
            )
        ]
    from model_optimizer.runtime.layers.quantization.spec import dequantized_at_load

    check = ctx.raw_check
    if dequantized_at_load(ctx.checkpoint.config):
        method = str(qc.get("quant_method"))
        return [
            Finding(
                "quant.config",
                "ok",
                f"{method} tensors are dequantized to the model dtype at load (its model reads them; they are "
                "not run in that format)",
                details={"quantization_config": qc},
            )
        ]
    if check.loads:
        return [
            Finding(
                "quant.config",
                "ok",
                f"quantized checkpoint: {check.quantization}; {len(check.quantized)} quantization tensors "
                "load in their own dtype",
                details={"quantization_config": qc},
            )
        ]
    return _float_weights_under_a_quant_config(ctx, qc)


def _float_weights_under_a_quant_config(ctx: InspectContext, qc: dict) -> list[Finding]:
    """quantization_config on a checkpoint whose weights are plain floats (copied from another folder)."""
    from model_optimizer.model.inspect.consumption import check_loading

    config = {k: v for k, v in ctx.checkpoint.config.items() if k != "quantization_config"}
    if not check_loading(config, [(t.name, t.shape) for t in ctx.checkpoint.tensors]).loads:
        return []  # the key findings say what is wrong
    folder = ctx.checkpoint.folder
    return [
        Finding(
            "quant.mismatch",
            "error",
            f"config.json's quantization_config says {ctx.raw_check.quantization}, but the weights are plain floats",
            "The loader looks for the quantized tensors the config names and finds float weights instead.",
            {
                "any": [
                    "Remove quantization_config from config.json (then --quantization fp8|int8|int8-w8a8|rtn-int4 quantizes at load)",
                    f"or quantize the weights: mopt quantize {folder} --method awq --output OUT",
                ]
            },
            {"quantization_config": qc},
        )
    ]
