"""Launches of the quantized-matmul Triton programs (`quant_kernels`): tile sizes, split-K, counters.

`quant_matmul` is what `quant_linear` calls on CUDA; `choose_tiles` picks one of the three launch
shapes described in `quant_kernels` from M, N, K and the SM count, and `QuantTiles` lets tests and
benchmarks/quant_kernels.py force another. Everything here is computed from shapes and Python ints,
never from tensor values, so a call can be captured in a CUDA graph.
"""

from __future__ import annotations

import functools
import os
from dataclasses import dataclass

import torch
import triton
import triton.language as tl

from model_optimizer.kernels.quant_kernels import KINDS, _quant_matmul_kernel, _quantize_rows_fp8_kernel

MAX_SPLIT_K = 16
MAX_COUNTERS = 16384  # output tiles that may split K at once (Llama's gate_up at BLOCK_N 16: 1,792)

_counters: dict[torch.device, torch.Tensor] = {}


@dataclass(frozen=True)
class QuantTiles:
    """Launch shape of `_quant_matmul_kernel`: what benchmarks/quant_kernels.py can sweep."""

    block_m: int
    block_n: int
    block_k: int
    split_k: int = 1
    num_warps: int = 4
    num_stages: int = 3
    group_m: int = 8


@functools.lru_cache(maxsize=8)
def _num_sms(device_index: int | None) -> int:
    if not torch.cuda.is_available():
        return 132  # interpreter: any plausible figure
    return torch.cuda.get_device_properties(device_index or 0).multi_processor_count


def _block_k_for(kind: str, group_size: int, want: int) -> int:
    """BLOCK_K for int4 must divide the group (one scale per tile row); others take `want`."""
    if kind != "int4":
        return want
    block_k = want
    while group_size % block_k:
        block_k //= 2
    return block_k


def choose_tiles(m: int, n: int, k: int, kind: str, group_size: int, num_sms: int) -> QuantTiles:
    """Tile sizes and split-K for one call; the three regimes are described in `quant_kernels`."""
    if m > 16:
        block_m = 64 if m <= 64 else 128
        return QuantTiles(block_m, 128, _block_k_for(kind, group_size, 64), 1, 4 if block_m == 64 else 8, 3)
    if m == 1 and (kind == "int4" or k % 4 == 0):  # the word-wise GEMV reads int8/fp8 rows as int32
        block_m, block_n, want_k = 1, 64 if kind == "int4" else 32, 128
    else:
        block_m, block_n, want_k = 16, 32, 128
    block_k = _block_k_for(kind, group_size, want_k)
    tiles = triton.cdiv(n, block_n)
    split = min(triton.cdiv(2 * num_sms, tiles), triton.cdiv(k, 2 * block_k), MAX_SPLIT_K)
    return QuantTiles(block_m, block_n, block_k, max(1, split), 4, 3)


def _dot_dtype(dtype: torch.dtype):
    """Operand type of tl.dot: the input's, except bf16 under the interpreter, whose bf16 dot is wrong."""
    if dtype == torch.bfloat16 and os.environ.get("TRITON_INTERPRET") == "1":
        return tl.float32
    return {torch.float16: tl.float16, torch.bfloat16: tl.bfloat16, torch.float32: tl.float32}[dtype]


def _split_counters(device: torch.device) -> torch.Tensor | None:
    """Zeroed per-tile counters of this device; None while a CUDA graph is being captured and none
    exist yet (zeroing them inside the capture would only happen at replay): one split then."""
    counters = _counters.get(device)
    if counters is None:
        if device.type == "cuda" and torch.cuda.is_current_stream_capturing():
            return None
        counters = _counters[device] = torch.zeros(MAX_COUNTERS, dtype=torch.int32, device=device)
    return counters


def quant_matmul(
    x: torch.Tensor,
    qweight: torch.Tensor,
    scales: torch.Tensor,
    zeros: torch.Tensor | None,
    kind: str,
    group_size: int = 0,
    bias: torch.Tensor | None = None,
    tiles: QuantTiles | None = None,
) -> torch.Tensor:
    """x (M, K) @ dequantized weight (N, K).T (+ bias) -> (M, N) in x.dtype; layouts in quant_reference.

    Inputs are trusted (quant_linear checks them); `tiles` overrides `choose_tiles` (benchmarks, tests).
    """
    m, k = x.shape
    n = scales.shape[0]
    x = x if x.stride(-1) == 1 else x.contiguous()
    qweight, scales = qweight.contiguous(), scales.contiguous()
    out = torch.empty(m, n, dtype=x.dtype, device=x.device)
    if m == 0 or n == 0:
        return out
    tiles = tiles or choose_tiles(m, n, k, kind, group_size, _num_sms(x.device.index))
    if kind == "int4" and group_size % tiles.block_k:
        raise ValueError(f"BLOCK_K {tiles.block_k} must divide the int4 group size {group_size}")
    if tiles.block_m == 1 and kind != "int4":
        if k % 4:
            raise ValueError(f"the one-row GEMV reads int8/fp8 weights as int32 words: K {k} must be a multiple of 4")
        qweight = qweight.view(torch.int32)  # (N, K // 4): four values per word, k = 4 * word + byte
    num_tiles = triton.cdiv(m, tiles.block_m) * triton.cdiv(n, tiles.block_n)
    split = tiles.split_k
    counters = _split_counters(x.device) if split > 1 and num_tiles <= MAX_COUNTERS else None
    if counters is None:
        split = 1
    k_per_split = triton.cdiv(triton.cdiv(k, split), tiles.block_k) * tiles.block_k
    split = triton.cdiv(k, k_per_split)  # no empty splits
    partials = torch.empty(split, m, n, dtype=torch.float32, device=x.device) if split > 1 else out
    zeros = zeros.contiguous() if zeros is not None else qweight
    _quant_matmul_kernel[(num_tiles, split)](
        x,
        qweight,
        scales,
        zeros,
        bias if bias is not None else scales,
        out,
        partials,
        counters if counters is not None else scales,
        m,
        n,
        k,
        x.stride(0),
        qweight.stride(0),
        scales.stride(0),
        zeros.stride(0),
        out.stride(0),
        k_per_split,
        KIND=KINDS[kind],
        GROUP=group_size if kind == "int4" else 1,
        HAS_BIAS=bias is not None,
        DOT_DTYPE=_dot_dtype(x.dtype),
        num_splits=split,
        BLOCK_M=tiles.block_m,
        BLOCK_N=tiles.block_n,
        BLOCK_K=tiles.block_k,
        GROUP_M=tiles.group_m,
        num_warps=tiles.num_warps,
        num_stages=tiles.num_stages,
    )
    return out


def quantize_rows_fp8(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Dynamic per-token fp8 quantization in one launch: (x_q e4m3 (M, K), scales float32 (M, 1)),
    as `quant_reference.quantize_rows_fp8_ref` (torch needs five kernels for it)."""
    m, k = x.shape
    x = x if x.stride(-1) == 1 else x.contiguous()
    q = torch.empty(m, k, dtype=torch.float8_e4m3fn, device=x.device)
    scales = torch.empty(m, 1, dtype=torch.float32, device=x.device)
    if m:
        _quantize_rows_fp8_kernel[(m,)](
            x, q, scales, k, x.stride(0), q.stride(0), BLOCK_K=min(4096, triton.next_power_of_2(max(k, 16)))
        )
    return q, scales
