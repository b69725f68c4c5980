"""Quantized linear layers: one function per weight format, dispatching to the fastest path the device has.

    w8a16_linear(x, qweight, scales, bias=None)                        int8 per-channel, weight-only
    w4a16_linear(x, qweight, scales, zeros, group_size, bias=None)     int4 groups with zero points
    fp8_linear(x, qweight, scales, bias=None)                          e4m3 per-channel

x is (..., K) and the result (..., N) in x.dtype; layouts in `quant_reference`. On CUDA with Triton
and a bf16/fp16 input the Triton program runs (`quant_matmul`, launch shape per GPU and shape from
`quant_tiles`: split-K tiles for decode, larger tiles for prefill); everywhere else the dequantizing
torch reference. fp8 above 16 rows on a GPU with fp8 tensor cores (sm_89+) may instead quantize the
activations per token (one Triton pass) and multiply in fp8 through `torch._scaled_mm` (W8A8):
`_scaled_mm` catches up with the bf16 matmul only at prefill sizes and reads weights slowly at decode
sizes (README "Quantized linear kernels"), so the measured tile table says which of the two runs per
shape.
No path reads tensor values on the host, so all of them run in CUDA graphs.
"""

from __future__ import annotations

import functools

import torch

from model_optimizer.runtime.kernels import triton_kernel
from model_optimizer.runtime.kernels.quant_reference import (
    FP8_DTYPE,
    fp8_linear_ref,
    w4a16_linear_ref,
    w8a16_linear_ref,
)

GEMV_MAX_ROWS = 16
"""Rows (tokens) up to which fp8 stays weight-only (exact activations) whatever the table says."""
_KERNEL_DTYPES = (torch.bfloat16, torch.float16)


def _check(
    x: torch.Tensor,
    qweight: torch.Tensor,
    scales: torch.Tensor,
    bias: torch.Tensor | None,
    weight_dtype: torch.dtype,
    packed_k: int,
) -> None:
    """Shapes and dtypes shared by the three formats (packed_k: in_features per stored column)."""
    if not x.is_floating_point() or x.dim() == 0:
        raise ValueError(f"x must be a floating-point (..., in_features) tensor, got {x.dtype} {tuple(x.shape)}")
    if qweight.dtype != weight_dtype or qweight.dim() != 2:
        raise ValueError(f"qweight must be 2-D {weight_dtype}, got {qweight.dtype} {tuple(qweight.shape)}")
    if qweight.shape[1] * packed_k != x.shape[-1]:
        raise ValueError(
            f"x has {x.shape[-1]} features but qweight {tuple(qweight.shape)} holds "
            f"{qweight.shape[1] * packed_k} per row"
        )
    if scales.shape[0] != qweight.shape[0]:
        raise ValueError(f"scales {tuple(scales.shape)} must have one row per output feature ({qweight.shape[0]})")
    if bias is not None and bias.shape != (qweight.shape[0],):
        raise ValueError(f"bias must be ({qweight.shape[0]},), got {tuple(bias.shape)}")


def _kernels(x: torch.Tensor):
    """quant_matmul's launcher where it runs: CUDA, Triton importable, half-precision input."""
    if not x.is_cuda or x.dtype not in _KERNEL_DTYPES:
        return None
    return triton_kernel("quant_matmul", "quant_matmul")


def _rows(x: torch.Tensor) -> torch.Tensor:
    return x.reshape(-1, x.shape[-1])  # (M, K); a view for the usual contiguous activations


def w8a16_linear(
    x: torch.Tensor, qweight: torch.Tensor, scales: torch.Tensor, bias: torch.Tensor | None = None
) -> torch.Tensor:
    """x @ (qweight * scales[:, None]).T (+ bias): int8 (N, K) weights, float32 (N,) scales."""
    _check(x, qweight, scales, bias, torch.int8, 1)
    if scales.dim() != 1:
        raise ValueError(f"int8 scales must be per output channel (N,), got {tuple(scales.shape)}")
    matmul = _kernels(x)
    if matmul is None:
        return w8a16_linear_ref(x, qweight, scales, bias)
    out = matmul(_rows(x), qweight, scales, None, "int8", 0, bias)
    return out.view(*x.shape[:-1], out.shape[-1])


def w4a16_linear(
    x: torch.Tensor,
    qweight: torch.Tensor,
    scales: torch.Tensor,
    zeros: torch.Tensor,
    group_size: int,
    bias: torch.Tensor | None = None,
) -> torch.Tensor:
    """x @ ((q - zeros) * scales).T per group of `group_size` along K (+ bias): int32 (N, K // 8) packed
    nibbles, scales (N, K // G) in the model dtype, zeros uint8 (N, K // G)."""
    _check(x, qweight, scales, bias, torch.int32, 8)
    k = x.shape[-1]
    if group_size <= 0 or k % group_size:
        raise ValueError(f"group_size must be a positive divisor of in_features {k}, got {group_size}")
    if scales.shape != (qweight.shape[0], k // group_size) or zeros.shape != scales.shape:
        raise ValueError(
            f"scales and zeros must be {(qweight.shape[0], k // group_size)}, "
            f"got {tuple(scales.shape)} and {tuple(zeros.shape)}"
        )
    matmul = _kernels(x) if group_size % 128 == 0 else None  # a kernel tile is 128 columns of one group
    if matmul is None:
        return w4a16_linear_ref(x, qweight, scales, zeros, group_size, bias)
    out = matmul(_rows(x), qweight, scales, zeros, "int4", group_size, bias)
    return out.view(*x.shape[:-1], out.shape[-1])


@functools.cache
def _has_fp8_tensor_cores(device_index: int) -> bool:
    return torch.cuda.get_device_capability(device_index) >= (8, 9)


def fp8_linear(
    x: torch.Tensor, qweight: torch.Tensor, scales: torch.Tensor, bias: torch.Tensor | None = None
) -> torch.Tensor:
    """x @ (qweight * scales[:, None]).T (+ bias): float8_e4m3fn (N, K) weights, float32 (N,) scales.

    Up to 16 rows the weights are dequantized inside the Triton program (the activations stay exact);
    above, on sm_89+ with a bf16 input, the tile table may pick W8A8: activations quantized per token
    and `torch._scaled_mm` (one more rounding of x, about 2% relative error on Gaussian data).
    """
    _check(x, qweight, scales, bias, FP8_DTYPE, 1)
    if scales.dim() != 1:
        raise ValueError(f"fp8 scales must be per output channel (N,), got {tuple(scales.shape)}")
    matmul = _kernels(x)
    if matmul is None or not _has_fp8_tensor_cores(x.device.index or 0):
        return fp8_linear_ref(x, qweight, scales, bias)
    rows = _rows(x)
    n, k = qweight.shape
    scaled_mm_ok = rows.shape[0] > GEMV_MAX_ROWS and x.dtype == torch.bfloat16 and n % 16 == 0 and k % 16 == 0
    tiles = triton_kernel("quant_matmul", "device_tiles")(rows, n, "fp8", 0, scaled_mm_ok)
    if tiles.backend == "scaled_mm":
        out = _scaled_mm_w8a8(rows, qweight, scales, bias)
    else:
        out = matmul(rows, qweight, scales, None, "fp8", 0, bias, tiles)
    return out.view(*x.shape[:-1], n)


def _scaled_mm_w8a8(x: torch.Tensor, qweight: torch.Tensor, scales: torch.Tensor, bias: torch.Tensor | None):
    """(M, K) bf16 -> per-token fp8 (one Triton pass) -> `_scaled_mm` with row-wise scales -> bf16 (M, N)."""
    quantize_rows = triton_kernel("quant_matmul", "quantize_rows_fp8")
    x_q, x_scales = quantize_rows(x)
    # _scaled_mm wants the second operand column-major: the (N, K) row-major weight transposed is
    out = torch._scaled_mm(
        x_q, qweight.t(), scale_a=x_scales, scale_b=scales.float().view(1, -1), out_dtype=torch.bfloat16
    )
    return out if bias is None else out.add_(bias)
