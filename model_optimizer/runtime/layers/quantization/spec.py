"""Which quantization a model gets: from config.json's `quantization_config` or from `--quantization`.

`QuantSpec` names the method (what the layers compute) and the source (the layout the checkpoint
holds); `resolve_spec` reads the formats we support and says plainly which ones we do not.
"""

from __future__ import annotations

import fnmatch
import re
import typing
from dataclasses import dataclass, field

from model_optimizer.runtime.config import Quantization
from model_optimizer.runtime.layers.quantization.quantizers import DEFAULT_GROUP_SIZE

QUANTIZATION_CHOICES = typing.get_args(Quantization)
ONLINE_METHODS = ("fp8", "int8", "int8-w8a8", "rtn-int4")
INT4_METHODS = ("awq", "rtn-int4")
"""The methods with int4 weights in groups along the input (the only ones a group size applies to)."""


@dataclass
class QuantSpec:
    method: str
    """fp8, int8, int8-w8a8, awq or rtn-int4: what the layers compute (int8-w8a8: int8 weights whose
    activations may be quantized per token, as llm-compressor's W8A8 checkpoints declare)."""
    source: str = "dense"
    """dense (quantize at load), autoawq, fp8-block or compressed-tensors: the checkpoint's layout."""
    group_size: int = DEFAULT_GROUP_SIZE
    symmetric: bool = False
    """compressed-tensors int4 without zero points."""
    packed: bool = True
    """compressed-tensors int8: pack-quantized (True) or int-quantized."""
    block: tuple[int, int] | None = None
    """Block-wise fp8 scales: (rows, columns) per block."""
    ignore: list[str] = field(default_factory=list)
    """Checkpoint module names (or re:patterns / globs) left unquantized."""

    def ignores(self, module_name: str) -> bool:
        for pattern in self.ignore:
            if pattern.startswith("re:"):
                if re.match(pattern[3:], module_name):
                    return True
            elif pattern == module_name or fnmatch.fnmatch(module_name, pattern) or module_name.endswith("." + pattern):
                return True
        return False


def resolve_spec(hf_config: dict, quantization: str | None) -> QuantSpec | None:
    """The spec for a model folder's config.json and the requested `--quantization` (None: as the
    checkpoint says). ValueError for unsupported layouts and for requests the checkpoint contradicts."""
    if quantization is not None and quantization not in QUANTIZATION_CHOICES:
        raise ValueError(f"quantization must be one of {', '.join(QUANTIZATION_CHOICES)}; got {quantization!r}")
    qc = hf_config.get("quantization_config")
    if qc:
        spec = spec_from_config(qc)
        if quantization == "int8" and spec.method == "int8-w8a8":
            spec.method = "int8"  # the same weights, the activations kept exact (weight-only) as asked
        if quantization not in (None, spec.method) and not (quantization == "awq" and spec.method == "rtn-int4"):
            raise ValueError(
                f"the checkpoint is already quantized ({spec.method}, {spec.source} layout); "
                f"--quantization {quantization} cannot change that: leave it unset or quantize the original model"
            )
        return spec
    if quantization in (None, "none"):
        return None
    if quantization not in ONLINE_METHODS:
        raise ValueError(
            f"--quantization {quantization} needs calibration data: run `mopt quantize MODEL --method awq "
            f"--output DIR` and serve DIR; on the fly we can quantize with {', '.join(ONLINE_METHODS)}"
        )
    return QuantSpec(method=quantization)


def spec_from_config(qc: dict) -> QuantSpec:
    if not isinstance(qc, dict):
        raise ValueError("config.json: quantization_config must be an object")
    try:
        return _spec_from_config(qc)
    except (AttributeError, TypeError, KeyError, IndexError) as exc:  # a field of the wrong JSON type
        raise ValueError(f"config.json: quantization_config is malformed ({type(exc).__name__}: {exc})") from None


def _spec_from_config(qc: dict) -> QuantSpec:
    kind = str(qc.get("quant_method", "")).lower()
    if kind == "awq":
        return _awq_spec(qc)
    if kind == "fp8":
        block = qc.get("weight_block_size")
        if not (isinstance(block, list) and len(block) == 2):
            raise ValueError(
                "config.json: fp8 quantization_config without weight_block_size (per-tensor fp8) is not supported; "
                "supported: block-wise fp8 (weight_block_size [128, 128]) and compressed-tensors fp8"
            )
        ignore = list(qc.get("modules_to_not_convert") or [])
        return QuantSpec("fp8", "fp8-block", block=(int(block[0]), int(block[1])), ignore=ignore)
    if kind == "compressed-tensors":
        return _compressed_tensors_spec(qc)
    raise ValueError(
        f"config.json: quantization method {kind!r} is not supported; supported: awq (AutoAWQ GEMM), "
        "fp8 (block-wise), compressed-tensors (pack-quantized int4/int8, int-quantized int8, float-quantized fp8)"
    )


def _awq_spec(qc: dict) -> QuantSpec:
    version = str(qc.get("version", "gemm")).lower()
    bits = qc.get("bits", qc.get("w_bit", 4))
    if version != "gemm" or bits != 4 or not qc.get("zero_point", True):
        raise ValueError(
            f"config.json: AWQ version {version!r}, {bits} bits, zero_point {qc.get('zero_point')} is not supported; "
            "supported: AutoAWQ GEMM, 4 bits, with zero points"
        )
    group = int(qc.get("group_size", qc.get("q_group_size", DEFAULT_GROUP_SIZE)))
    return QuantSpec("awq", "autoawq", group_size=group, ignore=list(qc.get("modules_to_not_convert") or []))


def _dynamic_int8_tokens(groups: dict) -> bool:
    """Whether the scheme quantizes the activations to int8 per token at run time (llm-compressor's
    W8A8 preset). Other activation schemes (static scales) are served weight-only, as before."""
    inputs = [g.get("input_activations") for g in groups.values() if isinstance(g, dict)]
    return any(
        isinstance(a, dict)
        and a.get("num_bits") == 8
        and a.get("type") == "int"
        and a.get("strategy") == "token"
        and a.get("dynamic") is True
        and a.get("symmetric", True)
        for a in inputs
    )


def _compressed_tensors_spec(qc: dict) -> QuantSpec:
    groups = qc.get("config_groups") or {}
    weights = [g.get("weights") for g in groups.values() if isinstance(g, dict) and g.get("weights")]
    if len(weights) != 1:
        raise ValueError(
            f"config.json: compressed-tensors with {len(weights)} weight schemes is not supported; expected one group"
        )
    w = weights[0]
    if w.get("actorder") in ("group", True):  # GPTQ's act-order: each input column's group in weight_g_idx
        raise ValueError(
            f"config.json: compressed-tensors weights with actorder {w['actorder']!r} (act-order, weight_g_idx) are "
            "not supported (the int4 kernels take groups as consecutive columns); quantize without act-order "
            '(actorder null or "weight")'
        )
    fmt = next((g.get("format") for g in groups.values() if g.get("format")), None) or qc.get("format")
    ignore = list(qc.get("ignore") or [])
    bits, kind, strategy = w.get("num_bits"), w.get("type"), w.get("strategy")
    if kind == "float" and bits == 8:
        block = w.get("block_structure") if strategy == "block" else None
        if strategy not in ("channel", "tensor", "block"):
            raise ValueError(f"config.json: compressed-tensors fp8 with strategy {strategy!r} is not supported")
        return QuantSpec("fp8", "compressed-tensors", block=tuple(block) if block else None, ignore=ignore)  # type: ignore[arg-type]
    if kind == "int" and bits == 4 and strategy == "group" and fmt == "pack-quantized":
        group = int(w.get("group_size") or DEFAULT_GROUP_SIZE)
        symmetric = bool(w.get("symmetric", True))
        return QuantSpec("rtn-int4", "compressed-tensors", group_size=group, symmetric=symmetric, ignore=ignore)
    if kind == "int" and bits == 8 and strategy in ("channel", "group") and w.get("symmetric", True):
        if fmt not in ("pack-quantized", "int-quantized"):
            raise ValueError(f"config.json: compressed-tensors int8 in format {fmt!r} is not supported")
        method = "int8-w8a8" if _dynamic_int8_tokens(groups) else "int8"
        return QuantSpec(method, "compressed-tensors", packed=fmt == "pack-quantized", ignore=ignore)
    raise ValueError(
        f"config.json: compressed-tensors weights {kind} {bits}-bit, strategy {strategy}, format {fmt} are not "
        "supported; supported: int4 group pack-quantized, int8 channel (pack- or int-quantized), fp8"
    )
