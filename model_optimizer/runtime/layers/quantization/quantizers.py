"""Round-to-nearest quantizers of one weight matrix into the shared layouts (see kernels/quant_reference.py).

Every method ends here: fp8 and int8 are per output channel and need no calibration; AWQ only
rescales and clips the float weights before `quantize_int4` rounds them.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from model_optimizer.runtime.kernels.formats import FP8_DTYPE, FP8_MAX, INT4_MAX, INT8_MAX
from model_optimizer.runtime.kernels.quant_reference import pack_int4

DEFAULT_GROUP_SIZE = 128


def divide(x: torch.Tensor, constant: float) -> torch.Tensor:
    """x / constant rounded the same on every device: torch turns a division by a Python scalar into a
    multiplication by its reciprocal on CUDA but not on the CPU, so scales differed in the last bit
    between a layer quantized on the GPU and one built in host memory (offload), and codes at a
    rounding tie flipped. Dividing by a tensor on x's device is an IEEE division on both."""
    return x / torch.tensor(constant, dtype=x.dtype, device=x.device)


@dataclass
class QuantizedWeight:
    """One layer's weight in a shared layout: `zeros` only for int4."""

    qweight: torch.Tensor
    scales: torch.Tensor
    zeros: torch.Tensor | None = None

    def astuple(self) -> tuple[torch.Tensor, ...]:
        """(qweight, scales), with zeros last for int4: the arguments the kernels and references take."""
        return (self.qweight, self.scales) if self.zeros is None else (self.qweight, self.scales, self.zeros)


def quantize_fp8(weight: torch.Tensor) -> QuantizedWeight:
    """e4m3 codes with one float32 scale per output row (the row's max maps to 448)."""
    w = weight.float()
    scales = divide(w.abs().amax(dim=1), FP8_MAX).clamp(min=1e-12)
    q = (w / scales[:, None]).clamp(-FP8_MAX, FP8_MAX).to(FP8_DTYPE)
    return QuantizedWeight(q, scales)


def quantize_int8(weight: torch.Tensor) -> QuantizedWeight:
    """Symmetric int8 codes -127..127 with one float32 scale per output row."""
    w = weight.float()
    scales = divide(w.abs().amax(dim=1), INT8_MAX).clamp(min=1e-12)
    q = torch.round(w / scales[:, None]).clamp(-INT8_MAX, INT8_MAX).to(torch.int8)
    return QuantizedWeight(q, scales)


def int4_params(weight: torch.Tensor, group_size: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Asymmetric (scales, zeros) of each group of `group_size` inputs: [min, max] (0 always inside)
    maps onto 0..15. Both (N, K // G), float32."""
    n, k = weight.shape
    check_group_size(k, group_size)
    w = weight.float().reshape(n, k // group_size, group_size)
    w_min = w.amin(dim=-1).clamp(max=0.0)
    w_max = w.amax(dim=-1).clamp(min=0.0)
    scales = divide(w_max - w_min, INT4_MAX).clamp(min=1e-10)
    zeros = torch.round(-w_min / scales).clamp(0, INT4_MAX)
    return scales, zeros


def quantize_int4_codes(
    weight: torch.Tensor, group_size: int, scale_dtype: torch.dtype = torch.float32
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(codes int32 (N, K) 0..15, scales float32 (N, K // G), zeros float32 (N, K // G)); the scales are
    rounded to `scale_dtype` first, so the codes match the scales the layer will really read."""
    n, k = weight.shape
    scales, _ = int4_params(weight, group_size)
    # a scale below scale_dtype's range (an all-zero group's 1e-10 in fp16) would round to 0 and make the
    # zero point NaN: such a scale takes the dtype's smallest positive value instead
    # (a Python number: a CPU tensor as clamp's bound fails on a CUDA weight)
    smallest = torch.nextafter(torch.zeros((), dtype=scale_dtype), torch.ones((), dtype=scale_dtype)).item()
    scales = scales.to(scale_dtype).float().clamp(min=smallest)
    zeros = torch.round(-weight.float().reshape(n, k // group_size, group_size).amin(dim=-1).clamp(max=0.0) / scales)
    zeros = zeros.clamp(0, INT4_MAX)
    w = weight.float().reshape(n, k // group_size, group_size)
    q = torch.round(w / scales[..., None] + zeros[..., None]).clamp(0, INT4_MAX)
    return q.reshape(n, k).to(torch.int32), scales, zeros


def fake_quantize_int4(weight: torch.Tensor, group_size: int, scale_dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """The float weight the int4 layer will really multiply by (quantize, then dequantize)."""
    n, k = weight.shape
    q, scales, zeros = quantize_int4_codes(weight, group_size, scale_dtype)
    w = (q.reshape(n, k // group_size, group_size).float() - zeros[..., None]) * scales[..., None]
    return w.reshape(n, k).to(weight.dtype)


def quantize_int4(weight: torch.Tensor, group_size: int, scale_dtype: torch.dtype | None = None) -> QuantizedWeight:
    """Round-to-nearest int4 in the packed layout, scales in the activation dtype (default: the weight's)."""
    scale_dtype = scale_dtype or weight.dtype
    q, scales, zeros = quantize_int4_codes(weight, group_size, scale_dtype)
    return QuantizedWeight(pack_int4(q), scales.to(scale_dtype), zeros.to(torch.uint8))


def check_group_size(in_features: int, group_size: int) -> None:
    if group_size <= 0 or group_size % 8 or in_features % group_size:
        raise ValueError(
            f"int4 groups of {group_size} inputs do not tile in_features {in_features}: "
            "the group size must be a multiple of 8 that divides every layer's input size (128 is the standard)"
        )
