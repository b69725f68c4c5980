"""Pure-torch references for quantized linear layers: the CPU path and the yardstick for the Triton kernels.

Layouts (weights of nn.Linear are (out_features N, in_features K); x is (M, K)):
- int8, weight-only, symmetric per output channel: qweight int8 (N, K), scales float32 (N,);
  w[n, k] = qweight[n, k] * scales[n].
- int4, weight-only, asymmetric in groups of G along K: qweight int32 (N, K // 8), nibble j of word i
  holding k = 8 * i + j at bits [4j, 4j + 4) ("sequential": compressed-tensors' packing, what
  checkpoints hold); zeros uint8 (N, K // G) in 0..15; scales (N, K // G) in the model dtype;
  w[n, k] = (q[n, k] - zeros[n, k // G]) * scales[n, k // G].
  The GPU kernels read the same codes repacked once at load time ("planes", same shape and dtype):
  per block of 128 columns the 64 bytes of a row are 32 16-bit lanes, and nibble p of lane c holds
  column 32 p + c. Nibble p of every lane is then a plane of 32 consecutive columns, which one mask
  and shift turn into the operand of one tensor-core dot, two lanes per 32-bit register
  (quant_kernels). K must be a multiple of 128.
- fp8 e4m3, per output channel: qweight float8_e4m3fn (N, K), scales float32 (N,);
  w[n, k] = float(qweight[n, k]) * scales[n].

The round-to-nearest producers of these layouts are layers/quantization/quantizers.py.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from model_optimizer.runtime.kernels.formats import FP8_DTYPE, FP8_MAX, INT8_MAX

_NIBBLE_SHIFTS = torch.arange(0, 32, 4, dtype=torch.int32)  # bit offset of nibble j in its word


def pack_int4(q: torch.Tensor) -> torch.Tensor:
    """(N, K) integers in 0..15 -> (N, K // 8) int32, eight nibbles per word along K, little nibble first."""
    if q.dim() != 2 or q.shape[1] % 8:
        raise ValueError(f"int4 values must be (N, K) with K a multiple of 8, got {tuple(q.shape)}")
    nibbles = q.to(torch.int64).reshape(q.shape[0], -1, 8) & 0xF  # (N, K // 8, 8)
    words = (nibbles << _NIBBLE_SHIFTS.to(q.device, torch.int64)).sum(dim=-1)  # fits in 32 unsigned bits
    return (words - (words >= 2**31).to(torch.int64) * 2**32).to(torch.int32)  # same bits, signed


def unpack_int4(qweight: torch.Tensor) -> torch.Tensor:
    """(N, K // 8) int32 -> (N, K) uint8 values in 0..15 (the inverse of pack_int4)."""
    if qweight.dtype != torch.int32 or qweight.dim() != 2:
        raise ValueError(f"packed int4 weights must be 2-D int32, got {qweight.dtype} {tuple(qweight.shape)}")
    nibbles = (qweight.unsqueeze(-1) >> _NIBBLE_SHIFTS.to(qweight.device)) & 0xF  # (N, K // 8, 8)
    return nibbles.reshape(qweight.shape[0], -1).to(torch.uint8)


INT4_PACKINGS = ("sequential", "planes")
PLANES_BLOCK = 128
"""Columns per block of the planes packing: 32 lanes of 16 bits, four 32-column planes."""


def _check_packing(packing: str) -> None:
    if packing not in INT4_PACKINGS:
        raise ValueError(f"int4 packing must be one of {', '.join(INT4_PACKINGS)}, got {packing!r}")


def pack_int4_planes(q: torch.Tensor) -> torch.Tensor:
    """(N, K) integers in 0..15 -> (N, K // 8) int32 in the planes packing (K a multiple of 128)."""
    if q.dim() != 2 or q.shape[1] % PLANES_BLOCK:
        raise ValueError(f"the planes packing needs (N, K) with K a multiple of {PLANES_BLOCK}, got {tuple(q.shape)}")
    n, k = q.shape
    blocks = q.to(torch.int32).reshape(n, k // PLANES_BLOCK, 4, 32) & 0xF  # [n, block, plane p, lane c]
    lanes = sum(blocks[:, :, p] << (4 * p) for p in range(4))  # (n, blocks, 32) in 0..65535
    lanes = (lanes - (lanes >= 2**15).to(torch.int32) * 2**16).to(torch.int16)  # same bits, signed
    return lanes.reshape(n, k // 4).view(torch.int32)  # lanes 2i, 2i + 1: low, high half of word i


def unpack_int4_planes(qweight: torch.Tensor) -> torch.Tensor:
    """(N, K // 8) int32 in the planes packing -> (N, K) uint8 values in 0..15."""
    if qweight.dtype != torch.int32 or qweight.dim() != 2:
        raise ValueError(f"packed int4 weights must be 2-D int32, got {qweight.dtype} {tuple(qweight.shape)}")
    n = qweight.shape[0]
    lanes = qweight.contiguous().view(torch.int16).to(torch.int32).reshape(n, -1, 1, 32)  # (n, blocks, 1, 32)
    planes = (lanes >> (4 * torch.arange(4, device=qweight.device)).view(1, 1, 4, 1)) & 0xF  # [n, b, p, c]
    return planes.reshape(n, -1).to(torch.uint8)


def repack_int4(qweight: torch.Tensor, source: str, target: str) -> torch.Tensor:
    """The same int4 codes in another packing (INT4_PACKINGS); exact both ways."""
    _check_packing(source)
    _check_packing(target)
    if source == target:
        return qweight
    if target == "planes":
        return pack_int4_planes(unpack_int4(qweight))
    return pack_int4(unpack_int4_planes(qweight))


def unpack_int4_codes(qweight: torch.Tensor, packing: str = "sequential") -> torch.Tensor:
    """(N, K) uint8 codes of either packing."""
    _check_packing(packing)
    return unpack_int4(qweight) if packing == "sequential" else unpack_int4_planes(qweight)


def dequantize_int8(qweight: torch.Tensor, scales: torch.Tensor, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """(N, K) weight in `dtype`, computed in float32: qweight[n, k] * scales[n]."""
    return (qweight.float() * scales.float().unsqueeze(1)).to(dtype)


def dequantize_fp8(qweight: torch.Tensor, scales: torch.Tensor, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """(N, K) weight in `dtype`, computed in float32: float(qweight[n, k]) * scales[n]."""
    return (qweight.float() * scales.float().unsqueeze(1)).to(dtype)


def dequantize_int4(
    qweight: torch.Tensor,
    scales: torch.Tensor,
    zeros: torch.Tensor,
    group_size: int,
    dtype: torch.dtype | None = None,
    packing: str = "sequential",
) -> torch.Tensor:
    """(N, K) weight, computed in float32: (q - zeros[group]) * scales[group]; `dtype` defaults to scales'."""
    q = unpack_int4_codes(qweight, packing).float()
    num_groups = q.shape[1] // group_size
    if (
        group_size <= 0
        or q.shape[1] % group_size
        or scales.shape != (q.shape[0], num_groups)
        or zeros.shape != scales.shape
    ):
        raise ValueError(
            f"int4 weight of {tuple(q.shape)} in groups of {group_size} needs scales and zeros of "
            f"{(q.shape[0], num_groups)}, got {tuple(scales.shape)} and {tuple(zeros.shape)}"
        )
    q = q.view(q.shape[0], num_groups, group_size)
    w = (q - zeros.float().unsqueeze(-1)) * scales.float().unsqueeze(-1)
    return w.reshape(q.shape[0], -1).to(scales.dtype if dtype is None else dtype)


def quantize_rows_fp8_ref(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Dynamic per-token activation quantization: (x_q float8_e4m3fn (M, K), scales float32 (M, 1)),
    x[m] ~ x_q[m] * scales[m]; a zero row gets scale 1 (anything times zero)."""
    amax = x.float().abs().amax(dim=1, keepdim=True)
    # times the float32 reciprocal, not "/ 448": torch divides by a scalar that way on CUDA but not on the
    # CPU, and the kernel must match one definition (a last-bit scale difference flips codes at ties)
    scales = torch.where(amax > 0, amax * (1.0 / FP8_MAX), torch.ones_like(amax))
    return (x.float() / scales).clamp(-FP8_MAX, FP8_MAX).to(FP8_DTYPE), scales


def quantize_rows_int8_ref(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Dynamic per-token symmetric int8 quantization (vLLM's for W8A8 int8 checkpoints, and ours for
    weights: quantizers.quantize_int8): (x_q int8 (M, K) in -127..127, scales float32 (M, 1)),
    scale = amax / 127 (times the float32 reciprocal, as for fp8), x / scale rounded half to even."""
    amax = x.float().abs().amax(dim=1, keepdim=True)
    scales = torch.where(amax > 0, amax * (1.0 / INT8_MAX), torch.ones_like(amax))
    return torch.round(x.float() / scales).clamp(-INT8_MAX, INT8_MAX).to(torch.int8), scales


def w8a16_linear_ref(
    x: torch.Tensor, qweight: torch.Tensor, scales: torch.Tensor, bias: torch.Tensor | None = None
) -> torch.Tensor:
    """x @ dequantize_int8(...).T (+ bias) in x.dtype."""
    return F.linear(x, dequantize_int8(qweight, scales, x.dtype), bias)


def w4a16_linear_ref(
    x: torch.Tensor,
    qweight: torch.Tensor,
    scales: torch.Tensor,
    zeros: torch.Tensor,
    group_size: int,
    bias: torch.Tensor | None = None,
    packing: str = "sequential",
) -> torch.Tensor:
    """x @ dequantize_int4(...).T (+ bias) in x.dtype."""
    return F.linear(x, dequantize_int4(qweight, scales, zeros, group_size, x.dtype, packing), bias)


def fp8_linear_ref(
    x: torch.Tensor, qweight: torch.Tensor, scales: torch.Tensor, bias: torch.Tensor | None = None
) -> torch.Tensor:
    """x @ dequantize_fp8(...).T (+ bias) in x.dtype (weight-only: the activations stay unquantized)."""
    return F.linear(x, dequantize_fp8(qweight, scales, x.dtype), bias)


def fp8_w8a8_linear_ref(
    x: torch.Tensor, qweight: torch.Tensor, scales: torch.Tensor, bias: torch.Tensor | None = None
) -> torch.Tensor:
    """What `torch._scaled_mm` computes for large M: activations quantized per token, float32 math."""
    x_q, x_scales = quantize_rows_fp8_ref(x)
    out = (x_q.float() * x_scales) @ dequantize_fp8(qweight, scales).T
    return (out if bias is None else out + bias.float()).to(x.dtype)


def int8_w8a8_linear_ref(
    x: torch.Tensor, qweight: torch.Tensor, scales: torch.Tensor, bias: torch.Tensor | None = None
) -> torch.Tensor:
    """What the int8 W8A8 kernels compute (and the CPU path of int8-w8a8 layers): x (..., K) quantized
    per token, integer products summed in float32 (exact up to 2**24, then float32's rounding), then
    both scales."""
    rows = x.reshape(-1, x.shape[-1])
    x_q, x_scales = quantize_rows_int8_ref(rows)
    out = (x_q.float() @ qweight.float().T) * x_scales * scales.float().view(1, -1)
    out = (out if bias is None else out + bias.float()).to(x.dtype)
    return out.view(*x.shape[:-1], out.shape[-1])
