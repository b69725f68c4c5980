"""Which quantization a model gets: from config.json's `quantization_config` or from `--quantization`.

`QuantSpec` names the method (what the layers compute) and the source (the layout the checkpoint
holds); `resolve_spec` reads the formats we support and says plainly which ones we do not.
"""

from __future__ import annotations

import fnmatch
import json
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
    targets: list[str] = field(default_factory=lambda: ["Linear"])
    """What the quantization covers (compressed-tensors' `targets`): the class name Linear (every linear
    layer), checkpoint module names or re:patterns; a layer outside them stays in float."""

    def quantizes(self, names: list[str]) -> bool:
        """Whether the checkpoint quantizes the module it calls by any of `names` (its name and aliases):
        one of them is targeted and none is ignored, as compressed-tensors matches them."""
        return any(self.targets_module(n) for n in names) and not any(self.ignores(n) for n in names)

    def targets_module(self, module_name: str) -> bool:
        """Whether `targets` name this checkpoint module (Linear: every linear layer, as the class name)."""
        return any(
            target == "Linear"
            or target == module_name
            or (target.startswith("re:") and re.match(target[3:], module_name))
            for target in self.targets
        )

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
    qc = stored_quantization(hf_config)
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


DEQUANTIZED_AT_LOAD = {"GptOssForCausalLM": "mxfp4"}
"""Architectures whose model reads a quantization_config format itself, dequantizing to the model dtype at load
(gpt-oss's MXFP4 experts: models/gpt_oss.py): quantization_config then means nothing here, and the model's
other weights are plain floats (`--quantization` may still round its linear layers at load)."""


def stored_quantization(hf_config: dict) -> typing.Any:
    """config.json's quantization_config as the checkpoint is read: None without one, or for one its model
    dequantizes at load (a float checkpoint to everything else: loader, `mopt quantize`'s source and reference)."""
    qc = hf_config.get("quantization_config")
    return None if not qc or dequantized_at_load(hf_config) else qc


def dequantized_at_load(hf_config: dict) -> bool:
    """Whether config.json's quantization_config is one its architecture's model dequantizes itself."""
    qc = hf_config.get("quantization_config")
    arch = (hf_config.get("architectures") or [""])[0]
    method = str(qc.get("quant_method", "")).lower() if isinstance(qc, dict) else None
    return method is not None and DEQUANTIZED_AT_LOAD.get(arch) == method


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
    w, fmt, targets = _weight_scheme(groups)
    fmt = fmt or qc.get("format")
    _refuse_what_changes_the_weights(qc, w, fmt)
    ignore = list(qc.get("ignore") or [])
    spec = _compressed_weights_spec(groups, w, fmt, ignore)
    spec.targets = targets
    return spec


def _weight_scheme(groups: dict) -> tuple[dict, str | None, list[str]]:
    """(weights, format, targets) of config_groups' one weight scheme. llm-compressor writes one group per
    distinct `targets`, so groups alike but for their targets are one scheme over all of them; groups of
    different schemes (format "mixed-precision") are refused."""
    schemes = [g for g in groups.values() if isinstance(g, dict) and g.get("weights")]
    kinds = {json.dumps([g.get(key) for key in ("weights", "input_activations", "format")]) for g in schemes}
    if len(kinds) != 1:
        found = f"{len(kinds)} different weight schemes (mixed precision)" if kinds else "no weight scheme"
        raise ValueError(f"config.json: compressed-tensors with {found} is not supported; expected one scheme")
    targets = [t for g in schemes for t in (g.get("targets") or ["Linear"])]
    return schemes[0]["weights"], schemes[0].get("format"), targets


def _refuse_what_changes_the_weights(qc: dict, w: dict, fmt: str | None) -> None:
    """ValueError for the fields that change what the tensors mean, which plain loading would ignore:
    act-order groups, weights stored uncompressed, sparse storage, rotations applied at run time."""
    if w.get("actorder") is True or str(w.get("actorder")).lower() in ("group", "dynamic"):
        raise ValueError(
            f"config.json: compressed-tensors weights with actorder {w['actorder']!r} (act-order, weight_g_idx) are "
            "not supported (the int4 kernels take groups as consecutive columns); quantize without act-order "
            '(actorder null or "weight")'
        )
    if fmt == "dense":
        raise ValueError(
            f"config.json: compressed-tensors format 'dense' (quantization_status {qc.get('quantization_status')!r}): "
            "the weights are stored in float beside their scales, not compressed (llm-compressor's "
            "save_compressed=False); save the model compressed, or serve a float checkpoint with --quantization"
        )
    sparsity = qc.get("sparsity_config") or {}
    if sparsity.get("format") not in (None, "dense"):
        raise ValueError(
            f"config.json: compressed-tensors sparsity_config in format {sparsity['format']!r} stores the weights "
            "sparse-compressed, which the engine does not read; supported: sparsity_config absent or format 'dense'"
        )
    online = _online_transforms(qc.get("transform_config") or {})
    if online:
        raise ValueError(
            f"config.json: compressed-tensors transform_config rotates {', '.join(online)} at run time (QuIP / "
            "SpinQuant-style online transforms), which the engine does not apply; supported: transforms fused "
            "into the weights (weight_input, weight_output) only"
        )


def _online_transforms(transform_config: dict) -> list[str]:
    """'hadamard at the input of re:.*down_proj$' for each transform applied to activations at run time."""
    return [
        f"{scheme.get('type')} at the {args.get('location')} of {', '.join(args.get('targets') or [])}"
        for scheme in (transform_config.get("config_groups") or {}).values()
        for args in scheme.get("apply") or []
        if args.get("location") not in ("weight_input", "weight_output")
    ]


def _compressed_weights_spec(groups: dict, w: dict, fmt: str | None, ignore: list[str]) -> QuantSpec:
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
