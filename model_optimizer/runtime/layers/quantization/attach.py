"""Give each linear layer of a built model its QuantMethod before weights load, and finish them after.

The model files stay unaware of quantization: this walks the module tree, so every architecture
built from `Linear` / `MergedLinear` gets it.
"""

from __future__ import annotations

import torch
from torch import nn

from model_optimizer.runtime.layers.linear import Linear
from model_optimizer.runtime.layers.quantization.method import QuantMethod, make_method
from model_optimizer.runtime.layers.quantization.sources import (
    AutoAwqSource,
    CompressedFp8Source,
    CompressedInt4Source,
    CompressedInt8Source,
    DenseSource,
    Fp8BlockSource,
    WeightSource,
)
from model_optimizer.runtime.layers.quantization.spec import QuantSpec


def make_source(spec: QuantSpec) -> WeightSource:
    if spec.source == "dense":
        return DenseSource()
    if spec.source == "autoawq":
        return AutoAwqSource()
    if spec.source == "fp8-block":
        return Fp8BlockSource(spec.block)  # type: ignore[arg-type]
    if spec.method == "fp8":
        return CompressedFp8Source(spec.block)
    if spec.method in ("int8", "int8-w8a8"):
        return CompressedInt8Source(spec.packed)
    return CompressedInt4Source(spec.symmetric)


def checkpoint_names(model: nn.Module, module_name: str) -> list[str]:
    """The checkpoint module names behind one of ours (q_proj, k_proj, v_proj for qkv_proj)."""
    stacked = getattr(model, "stacked_params", {})
    dotted = module_name + "."
    names = [dotted.replace(ours, theirs)[:-1] for theirs, (ours, _) in stacked.items() if ours in dotted]
    return names or [module_name]


def _quantized(model: nn.Module, spec: QuantSpec, module_name: str) -> bool:
    """Whether the checkpoint quantizes this module: every checkpoint module behind it (q, k and v for
    qkv_proj) targeted and not ignored under any name the checkpoint may give it (`checkpoint_aliases`:
    Gemma 3's image-and-text layout), or none of them; ValueError when only some are, as one layer here
    cannot be part quantized."""
    aliases = getattr(model, "checkpoint_aliases", None)
    quantized = {
        name: spec.quantizes([name, *(aliases(name) if aliases is not None else [])])
        for name in checkpoint_names(model, module_name)
    }
    if len(set(quantized.values())) > 1:
        plain = ", ".join(n for n, q in quantized.items() if not q)
        rounded = ", ".join(n for n, q in quantized.items() if q)
        raise ValueError(
            f"{module_name}: the checkpoint leaves {plain} unquantized but quantizes {rounded}, which are one layer "
            "here; quantize them alike (all of them or none in quantization_config's `ignore`)"
        )
    return all(quantized.values())


def quantized_layers(model: nn.Module) -> list[tuple[str, Linear]]:
    return [(name, m) for name, m in model.named_modules() if isinstance(m, Linear) and m.quant_method is not None]


def attach_quantization(
    model: nn.Module, spec: QuantSpec | None, dtype: torch.dtype, dummy: bool = False
) -> list[tuple[str, Linear]]:
    """Set `quant_method` on every Linear the spec does not ignore; with dummy weights the layers are
    filled as dense ones and rounded after, whatever layout a real checkpoint would have."""
    if spec is None:
        return []
    source = DenseSource() if dummy else make_source(spec)
    layers = []
    for name, module in model.named_modules():
        if not isinstance(module, Linear) or not _quantized(model, spec, name):
            continue
        method: QuantMethod = make_method(spec.method, source, dtype, spec.group_size)
        try:
            method.create_weights(module)
        except ValueError as exc:
            raise ValueError(f"{name}: {exc}") from None
        module.quant_method = method
        layers.append((name, module))
    model.quant_spec = spec
    return layers


def process_quantized_weights(model: nn.Module) -> None:
    """After loading: every quantized layer converts what it received to the shared layout."""
    with torch.no_grad():
        for name, module in quantized_layers(model):
            try:
                module.quant_method.process_weights_after_loading(module)
            except ValueError as exc:
                raise ValueError(f"{name}: {exc}") from None
