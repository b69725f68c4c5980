"""QuantMethod: what a quantized linear layer stores and how it multiplies.

The three steps follow the layer's life: `create_weights` before the checkpoint loads (the
`WeightSource` decides which tensors the checkpoint provides), `process_weights_after_loading`
once every tensor is in (they become the shared layout of kernels/quant_reference.py) and `apply`
in the forward pass, which only calls a kernel on fixed tensors, so CUDA graphs capture it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch

from model_optimizer.runtime.kernels import quant_linear
from model_optimizer.runtime.kernels import quant_reference as ref
from model_optimizer.runtime.layers.quantization.quantizers import (
    DEFAULT_GROUP_SIZE,
    QuantizedWeight,
    check_group_size,
    quantize_fp8,
    quantize_int4,
    quantize_int8,
)
from model_optimizer.runtime.layers.quantization.spec import INT4_METHODS

if TYPE_CHECKING:
    from model_optimizer.runtime.layers.linear import Linear
    from model_optimizer.runtime.layers.quantization.sources import WeightSource

METHODS = ("fp8", "int8", "int8-w8a8", "awq", "rtn-int4")


class QuantMethod:
    name = ""
    bits = 16

    def __init__(self, source: WeightSource, act_dtype: torch.dtype = torch.float32) -> None:
        self.source = source
        self.act_dtype = act_dtype
        """The model dtype: int4 scales are kept in it, as the kernels read them."""

    def create_weights(self, layer: Linear) -> None:
        self.source.create(layer, self)

    def process_weights_after_loading(self, layer: Linear) -> None:
        """Turn what the checkpoint gave into the shared layout, as buffers on the layer's device."""
        device = self.source.device(layer)
        qw = self.source.finish(layer, self)
        self.source.remove(layer)
        for name, tensor in (("qweight", qw.qweight), ("scales", qw.scales), ("zeros", qw.zeros)):
            if tensor is not None:
                layer.register_buffer(name, tensor.to(device).contiguous(), persistent=False)

    def quantize(self, weight: torch.Tensor, act_dtype: torch.dtype) -> QuantizedWeight:
        raise NotImplementedError

    def checkpoint_tensors(self, layer: Linear) -> QuantizedWeight:
        """The layer's tensors in the shared layout a checkpoint holds (what the writer saves), whatever
        packing the kernels read them in."""
        return QuantizedWeight(layer.qweight, layer.scales, getattr(layer, "zeros", None))

    def dequantize(self, layer: Linear) -> torch.Tensor:
        """The (N, K) float32 weight the layer multiplies by."""
        raise NotImplementedError

    def apply(self, layer: Linear, x: torch.Tensor) -> torch.Tensor:
        raise NotImplementedError

    def apply_gated(self, layer: Linear, x: torch.Tensor) -> torch.Tensor | None:
        """silu(gate) * up of a [gate | up] layer in the matmul's own launch, where a kernel does that for
        this shape (quant_linear.gated_gemv); None: the caller runs `apply`, then `silu_and_mul`."""
        return None


class Fp8Method(QuantMethod):
    name, bits = "fp8", 8

    def quantize(self, weight: torch.Tensor, act_dtype: torch.dtype) -> QuantizedWeight:
        return quantize_fp8(weight)

    def dequantize(self, layer: Linear) -> torch.Tensor:
        return ref.dequantize_fp8(layer.qweight, layer.scales)

    def apply(self, layer: Linear, x: torch.Tensor) -> torch.Tensor:
        return quant_linear.fp8_linear(x, layer.qweight, layer.scales, layer.bias)

    def apply_gated(self, layer: Linear, x: torch.Tensor) -> torch.Tensor | None:
        return quant_linear.gated_gemv("fp8", x, layer.qweight, layer.scales, bias=layer.bias)


class Int8Method(QuantMethod):
    """int8 weights per channel; `dynamic_activations` (int8-w8a8): the activations are quantized per
    token too, on the CPU always, on a GPU from INT8_W8A8_MIN_ROWS rows where the tile table measured
    that faster and from 65 rows where it has no entry (quant_linear.w8a16_linear)."""

    name, bits = "int8", 8

    def __init__(self, source: WeightSource, act_dtype: torch.dtype, dynamic_activations: bool = False) -> None:
        super().__init__(source, act_dtype)
        self.dynamic_activations = dynamic_activations
        self.name = "int8-w8a8" if dynamic_activations else "int8"

    def quantize(self, weight: torch.Tensor, act_dtype: torch.dtype) -> QuantizedWeight:
        return quantize_int8(weight)

    def dequantize(self, layer: Linear) -> torch.Tensor:
        return ref.dequantize_int8(layer.qweight, layer.scales)

    def apply(self, layer: Linear, x: torch.Tensor) -> torch.Tensor:
        return quant_linear.w8a16_linear(x, layer.qweight, layer.scales, layer.bias, self.dynamic_activations)

    def apply_gated(self, layer: Linear, x: torch.Tensor) -> torch.Tensor | None:
        return quant_linear.gated_gemv("int8", x, layer.qweight, layer.scales, bias=layer.bias)


class Int4Method(QuantMethod):
    """W4A16 in groups along K with zero points: AWQ and round-to-nearest share it (AWQ only
    chooses better float weights before rounding)."""

    bits = 4

    def __init__(
        self,
        source: WeightSource,
        act_dtype: torch.dtype = torch.float32,
        name: str = "rtn-int4",
        group_size: int = DEFAULT_GROUP_SIZE,
    ) -> None:
        super().__init__(source, act_dtype)
        self.name, self.group_size = name, group_size
        self.packing = "sequential"
        """How layer.qweight holds the codes (quant_reference.INT4_PACKINGS): the kernels' planes packing
        once loaded on a GPU that runs them, the checkpoint's sequential one elsewhere."""

    def process_weights_after_loading(self, layer: Linear) -> None:
        """The shared layout, then, where the GPU kernels will read it, the planes packing: a one-time
        repack (same shape and dtype) instead of a shuffle on every call. Row shards stay exact: the
        packing never mixes rows, and a rank's columns are whole 128-column blocks."""
        super().process_weights_after_loading(layer)
        if quant_linear.int4_kernel_packing(layer.qweight.device, self.act_dtype, self.group_size, layer.in_features):
            layer.qweight = ref.repack_int4(layer.qweight, "sequential", "planes")
            self.packing = "planes"

    def checkpoint_tensors(self, layer: Linear) -> QuantizedWeight:
        return QuantizedWeight(ref.repack_int4(layer.qweight, self.packing, "sequential"), layer.scales, layer.zeros)

    def create_weights(self, layer: Linear) -> None:
        check_group_size(layer.in_features, self.group_size)
        super().create_weights(layer)

    def quantize(self, weight: torch.Tensor, act_dtype: torch.dtype) -> QuantizedWeight:
        return quantize_int4(weight, self.group_size, act_dtype)

    def from_codes(self, q: torch.Tensor, scales: torch.Tensor, zeros: torch.Tensor) -> QuantizedWeight:
        """Shared layout from unpacked codes (N, K) 0..15 and per-group scales and zeros (N, K // G)."""
        n, k = q.shape
        if scales.shape != (n, k // self.group_size) or zeros.shape != scales.shape:
            raise ValueError(
                f"int4 weight {(n, k)} in groups of {self.group_size} needs scales and zero points of "
                f"{(n, k // self.group_size)}, got {tuple(scales.shape)} and {tuple(zeros.shape)}"
            )
        return QuantizedWeight(ref.pack_int4(q), scales.to(self.act_dtype), zeros.to(torch.uint8))

    def dequantize(self, layer: Linear) -> torch.Tensor:
        return ref.dequantize_int4(
            layer.qweight, layer.scales, layer.zeros, self.group_size, torch.float32, self.packing
        )

    def apply(self, layer: Linear, x: torch.Tensor) -> torch.Tensor:
        return quant_linear.w4a16_linear(
            x, layer.qweight, layer.scales, layer.zeros, self.group_size, layer.bias, self.packing
        )


def make_method(
    name: str, source: WeightSource, act_dtype: torch.dtype, group_size: int = DEFAULT_GROUP_SIZE
) -> QuantMethod:
    if name == "fp8":
        return Fp8Method(source, act_dtype)
    if name in ("int8", "int8-w8a8"):
        return Int8Method(source, act_dtype, dynamic_activations=name == "int8-w8a8")
    if name in INT4_METHODS:
        return Int4Method(source, act_dtype, name, group_size)
    raise ValueError(f"unknown quantization method {name!r}; expected one of {', '.join(METHODS)}")
