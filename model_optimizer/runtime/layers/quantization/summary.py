"""What a built model holds, in the words a user checks it against: its dtype, its weight format and
how many parameters it stands for.

`sum(p.numel() for p in model.parameters())` is right for a float model and wrong for a quantized
one: after loading, a quantized linear keeps its weight as buffers (codes, scales, zero points), not
parameters, and before that as packed checkpoint tensors (eight int4 codes in one int32). Here every
quantized linear counts as the out x in weight it stands for, so an AWQ model reports the same count
as the float model it was made from. It works on a loaded model and on inspect's meta-device model
alike (both know each linear's shape).
"""

from __future__ import annotations

from dataclasses import dataclass

from torch import nn

from model_optimizer.runtime.layers.linear import Linear


@dataclass(frozen=True)
class WeightSummary:
    num_params: int
    """Parameters the model stands for: a quantized linear counts its out x in weight, however packed."""
    dtype: str
    """The model dtype: activations, and the weights that are not quantized (embedding, norms)."""
    quantization: str | None = None
    """'awq int4 (autoawq layout)', 'fp8 (quantized at load)', ...; None for a float model."""
    num_quantized_layers: int = 0

    def describe(self) -> str:
        """e.g. 'bfloat16, awq int4 weights (autoawq layout) in 56 linears, 14,556,544 parameters (0.01 B)'."""
        fmt = f", {self.quantization} weights in {self.num_quantized_layers} linears" if self.quantization else ""
        return f"{self.dtype}{fmt}, {self.num_params:,} parameters ({self.num_params / 1e9:.2f} B)"


def summarize_weights(model: nn.Module) -> WeightSummary:
    """The summary of a built model (see the module docstring)."""
    quantized = [m for m in model.modules() if isinstance(m, Linear) and m.quant_method is not None]
    owners = {id(m) for m in quantized}
    seen: set[int] = set()
    total = sum(m.out_features * m.in_features for m in quantized)
    dtype = None
    for module in model.modules():
        for name, param in module.named_parameters(recurse=False):
            if id(param) in seen:
                continue  # a tied weight counts once
            seen.add(id(param))
            if id(module) in owners and name != "bias":
                continue  # the layer's weight in whatever form: counted as out x in above
            total += param.numel()
            if dtype is None and param.is_floating_point():
                dtype = str(param.dtype).removeprefix("torch.")
    spec = getattr(model, "quant_spec", None)
    return WeightSummary(total, dtype or "?", _format(spec) if quantized else None, len(quantized))


def _format(spec: object) -> str:
    method = getattr(spec, "method", "?")
    source = getattr(spec, "source", "dense")
    name = {"awq": "awq int4"}.get(method, method)
    return f"{name} (quantized at load)" if source == "dense" else f"{name} ({source} layout)"
