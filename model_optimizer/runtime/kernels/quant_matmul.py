"""Launches of the quantized-matmul Triton program (`quant_kernels`): launch shape, split-K, counters.

`quant_matmul` is what `quant_linear` calls on CUDA; `choose_tiles` picks the launch shape from the
measured table of this GPU (`quant_tiles`) or the default rule, and `tiles=` lets tests and
benchmarks/quant_kernels.py force another. Everything here is computed from shapes and Python ints,
never from tensor values, so a call can be captured in a CUDA graph. int4 weights come in the
planes packing (quant_reference.repack_int4 at load time).
"""

from __future__ import annotations

import functools
import os

import torch
import triton
import triton.language as tl

from model_optimizer.runtime.kernels import aot, pdl
from model_optimizer.runtime.kernels.counters import Counters
from model_optimizer.runtime.kernels.quant_dequant import _dequantize_kernel
from model_optimizer.runtime.kernels.quant_kernels import INT4_BLOCK_K, KINDS, W8A8_KINDS, _quant_matmul_kernel
from model_optimizer.runtime.kernels.quant_tiles import (
    ANY_KINDS,
    INT_MM_MIN_ROWS,
    MAX_SPLIT_K,
    QuantTiles,
    default_tiles,
    lookup,
    program_tiles,
)
from model_optimizer.runtime.kernels.w8a8_kernels import _quantize_rows_kernel, _scale_int32_kernel

__all__ = [
    "MAX_SPLIT_K",
    "QuantTiles",
    "choose_tiles",
    "dequantize_weight",
    "int_mm_w8a8",
    "quant_matmul",
    "quantize_rows_fp8",
    "quantize_rows_int8",
]

MAX_COUNTERS = 16384  # output tiles that may split K at once (Llama's gate_up at BLOCK_N 32: 896)

_counters = Counters(MAX_COUNTERS)


def _device_facts(device_index: int | None) -> tuple[str, int]:
    """(name, SM count) of the GPU (of the target while compiling ahead, aot.py); under the
    interpreter a plausible H200."""
    if aot.building() is None and not torch.cuda.is_available():
        return "interpreter", 132
    return _facts(device_index, aot.building())[:2]


@functools.lru_cache(maxsize=8)
def _facts(device_index: int | None, target: aot.AotTarget | None) -> tuple[str, int, tuple[int, int]]:
    return aot.device_facts(device_index)


def choose_tiles(
    m: int,
    n: int,
    k: int,
    kind: str,
    group_size: int,
    num_sms: int,
    gpu: str = "",
    w8a8: bool = False,
    graph_safe: bool = False,
    program_only: bool = False,
) -> QuantTiles:
    """The table's measured tiles for this GPU and shape, else `quant_tiles.default_tiles`.
    `w8a8`: the caller accepts quantized activations (fp8 or int8 weights: W8A8, our program, or for
    fp8 `torch._scaled_mm`).
    `graph_safe`: a launch a CUDA-graph capture can take without the scratch buffer (never "dequant": the
    table's capture entry, else the default rule's Triton tiles). `program_only`: our Triton program's
    tiles only (what `quant_matmul` launches when not told)."""
    graph_safe = graph_safe or program_only
    tiles = None
    if gpu and kind in ANY_KINDS and w8a8:  # the fastest of all kinds of this format, W8A8 included
        tiles = lookup(gpu, ANY_KINDS[kind], m, n, k, graph_safe)
    tiles = tiles or (lookup(gpu, kind, m, n, k, graph_safe) if gpu else None)
    if tiles is None or (tiles.quantizes_activations and not w8a8) or (tiles.block_m == 1 and m != 1):
        tiles = default_tiles(kind, m, n, k, num_sms, w8a8, graph_safe)
    if program_only and tiles.backend != "triton":
        tiles = program_tiles(kind, m, n, k, num_sms)
    return tiles


def device_tiles(
    x: torch.Tensor,
    n: int,
    kind: str,
    group_size: int = 0,
    w8a8: bool = False,
    graph_safe: bool = False,
    program_only: bool = False,
) -> QuantTiles:
    """`choose_tiles` for the rows of x on x's GPU."""
    gpu, num_sms = _device_facts(x.device.index if x.is_cuda else None)  # meta: the ahead-of-time target
    m, k = x.shape
    return choose_tiles(m, n, k, kind, group_size, num_sms, gpu, w8a8, graph_safe, program_only)


def _interpreted() -> bool:
    return os.environ.get("TRITON_INTERPRET") == "1"


def _dot_dtype(dtype: torch.dtype, w8a8: bool = False, kind: str = ""):
    """Operand type of tl.dot: the input's (e4m3 / int8 for W8A8), except under the interpreter, whose
    bf16 and fp8 dots are wrong (float32 there; its int8 dots are right)."""
    if w8a8 and kind == "int8":
        return tl.int8
    if _interpreted() and (w8a8 or dtype == torch.bfloat16):
        return tl.float32
    if w8a8:
        return tl.float8e4nv
    return {torch.float16: tl.float16, torch.bfloat16: tl.bfloat16, torch.float32: tl.float32}[dtype]


def _packed_math(device_index: int) -> bool:
    """bf16x2 / f16x2 PTX arithmetic in the widening (quant_dequant): sm_90 on, never the interpreter."""
    return _facts(device_index, aot.building())[2] >= (9, 0)


def _use_asm(x: torch.Tensor) -> bool:
    return (
        aot.on_gpu(x)
        and x.dtype in (torch.bfloat16, torch.float16)
        and not _interpreted()
        and _packed_math(x.device.index or 0)
    )


def _split_counters(device: torch.device) -> torch.Tensor | None:
    """Zeroed per-tile counters of this device (kernels/counters.py); None inside a CUDA-graph capture
    before any exist: one split then."""
    return _counters.get(device, MAX_COUNTERS)


def gates(tiles: QuantTiles, n: int) -> bool:
    """Whether `quant_matmul(..., gated=True)` runs with `tiles` on an N-row [gate | up] weight: our GEMV
    (block_m 1; never W8A8, which _check_tiles keeps to tensor-core tiles) with a gate and an up row per
    program, and an even N."""
    return tiles.backend == "triton" and tiles.block_m == 1 and tiles.block_n >= 2 and n % 2 == 0


def _check_tiles(tiles: QuantTiles, kind: str, group_size: int, k: int) -> None:
    if kind not in KINDS or kind in W8A8_KINDS.values():
        raise ValueError(
            f"kind must be one of int8, fp8, int4, bf16 (fp8 / int8 with w8a8 tiles for W8A8), got {kind!r}"
        )
    if tiles.backend != "triton":
        raise ValueError(f"quant_matmul runs the Triton program only, got backend {tiles.backend!r}")
    if tiles.block_m != 1 and (tiles.block_m < 16 or tiles.block_n < 16):
        raise ValueError(f"tensor-core tiles need block_m and block_n >= 16 (or block_m 1), got {tiles}")
    for name in ("block_m", "block_n", "block_k"):  # tl.arange sizes; the GEMV walks K in pieces that divide it
        value = getattr(tiles, name)
        if value < 1 or value & (value - 1):
            raise ValueError(f"{name} must be a power of two, got {value} in {tiles}")
    if tiles.w8a8 and (kind not in W8A8_KINDS or tiles.block_m == 1 or tiles.block_k < 32):
        raise ValueError(
            f"W8A8 tiles are for fp8 and int8 weights, with block_m >= 16 and block_k >= 32, got {kind} {tiles}"
        )
    if tiles.accumulators not in (1, 4) or (tiles.accumulators == 4 and (kind != "int4" or tiles.block_m == 1)):
        raise ValueError(f"accumulators is 1, or 4 for int4 tensor-core tiles (one per plane), got {kind} {tiles}")
    if kind != "int4":
        return
    if group_size % INT4_BLOCK_K or k % INT4_BLOCK_K:
        raise ValueError(
            f"int4 kernels read {INT4_BLOCK_K}-column blocks inside one group: the group size and in_features "
            f"must be multiples of {INT4_BLOCK_K}, got group size {group_size} and {k} features"
        )
    if tiles.block_k % INT4_BLOCK_K or (tiles.block_m > 1 and tiles.block_k != INT4_BLOCK_K):
        raise ValueError(
            f"int4 tiles are made of {INT4_BLOCK_K}-column blocks: block_k must be {INT4_BLOCK_K} for tensor-core "
            f"tiles and a multiple of {INT4_BLOCK_K} for the GEMV, got {tiles}"
        )


def prefetches(kind: str, tiles: QuantTiles, k: int) -> bool:
    """The GEMV's register prefetch of the next tile: num_stages >= 2 (Triton's own pipelining covers
    only the loads of tl.dot programs, so for the GEMV the field says this instead); int8/fp8 also
    need a K tile of one piece (<= 256 columns) that divides K."""
    if tiles.block_m != 1 or tiles.num_stages < 2:
        return False
    return kind == "int4" or (tiles.block_k <= 256 and k % tiles.block_k == 0)


def quant_matmul(
    x: torch.Tensor,
    qweight: torch.Tensor,
    scales: torch.Tensor | None,
    zeros: torch.Tensor | None,
    kind: str,
    group_size: int = 0,
    bias: torch.Tensor | None = None,
    tiles: QuantTiles | None = None,
    gated: bool = False,
) -> torch.Tensor:
    """x (M, K) @ dequantized weight (N, K).T (+ bias) -> (M, N) in x.dtype; layouts in quant_reference,
    int4 in the planes packing; kind "bf16": qweight is the plain weight in x's dtype, scales None.

    `gated`: the weight is [gate | up] and the result silu(gate) * up, (M, N / 2), in the matmul's own
    launch (the SiLU-and-mul of an MLP without its own kernel); GEMV tiles only (block_m 1).

    Inputs are trusted (quant_linear checks them); `tiles` overrides `choose_tiles` (benchmarks, tests),
    which is asked for our program's tiles only (never another backend the table may name).
    W8A8 tiles (fp8, int8) quantize x per token first, one more launch.
    """
    m, k = x.shape
    n = qweight.shape[0]
    x = x if x.stride(-1) == 1 else x.contiguous()
    qweight = qweight.contiguous()
    scales = scales.contiguous() if scales is not None else qweight  # bf16: no scales
    out = torch.empty(m, n // 2 if gated else n, dtype=x.dtype, device=x.device)
    if m == 0 or n == 0:
        return out
    tiles = tiles or device_tiles(x, n, kind, group_size, program_only=True)
    _check_tiles(tiles, kind, group_size, k)
    if gated and not gates(tiles, n):
        raise ValueError(f"a gated matmul needs GEMV tiles (block_m 1, block_n >= 2) and an even N, got {tiles}, N={n}")
    out_cols = n // 2 if gated else n
    out_block = tiles.block_n // 2 if gated else tiles.block_n
    num_tiles = (m if tiles.block_m == 1 else triton.cdiv(m, tiles.block_m)) * triton.cdiv(out_cols, out_block)
    split = tiles.split_k
    counters = _split_counters(x.device) if split > 1 and num_tiles <= MAX_COUNTERS else None
    if counters is None:
        split = 1
    step = INT4_BLOCK_K if kind == "int4" and tiles.block_m > 1 else tiles.block_k
    k_per_split = triton.cdiv(triton.cdiv(k, split), step) * step
    split = triton.cdiv(k, k_per_split)  # no empty splits
    partials = torch.empty(split, m, n, dtype=torch.float32, device=x.device) if split > 1 else out
    x_in, x_scales, code = x, scales, KINDS[kind]
    if tiles.w8a8:
        x_in, x_scales = _quantize_rows(x, kind == "int8")
        code = KINDS[W8A8_KINDS[kind]]
    if kind == "int4" and tiles.block_m > 1:  # the tensor-core program reads 16-bit lanes
        qweight = qweight.view(torch.int16)
    zeros = zeros.contiguous() if zeros is not None else qweight
    _quant_matmul_kernel[(num_tiles, split)](
        x_in,
        qweight,
        scales,
        zeros,
        x_scales,
        bias if bias is not None else scales,
        out,
        partials,
        counters if counters is not None else scales,
        m,
        n,
        k,
        x_in.stride(0),
        qweight.stride(0),
        scales.stride(0),
        zeros.stride(0),
        out.stride(0),
        k_per_split,
        split,
        KIND=code,
        GROUP=group_size if kind == "int4" else 1,
        HAS_BIAS=bias is not None,
        EVEN_K=k % tiles.block_k == 0,
        EVEN_N=out_cols % out_block == 0,
        DOT_DTYPE=_dot_dtype(x.dtype, tiles.w8a8, kind),
        BLOCK_M=tiles.block_m,
        BLOCK_N=tiles.block_n,
        BLOCK_K=tiles.block_k,
        USE_ASM=_use_asm(x),
        PREFETCH=prefetches(kind, tiles, k),
        GATED=gated,
        ACCS=tiles.accumulators,
        num_warps=tiles.num_warps,
        num_stages=tiles.num_stages,
        **({"maxnreg": tiles.max_registers} if tiles.max_registers else {}),
        **pdl.options(x),
    )
    return out


def quantize_rows_fp8(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Dynamic per-token fp8 quantization in one launch: (x_q e4m3 (M, K), scales float32 (M, 1)),
    as `quant_reference.quantize_rows_fp8_ref` (torch needs five kernels for it)."""
    return _quantize_rows(x, False)


def quantize_rows_int8(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Dynamic per-token symmetric int8 quantization in one launch: (x_q int8 (M, K) in -127..127, scales
    float32 (M, 1)), as `quant_reference.quantize_rows_int8_ref`."""
    return _quantize_rows(x, True)


def int_mm_w8a8(
    x: torch.Tensor, qweight: torch.Tensor, scales: torch.Tensor, bias: torch.Tensor | None = None
) -> torch.Tensor:
    """int8 W8A8 through cuBLAS: x (M, K) quantized per token (one Triton pass), `torch._int_mm` against
    the int8 (N, K) weight (exact int32 sums), then both scales and the bias in one Triton pass ->
    (M, N) in x.dtype; as `quant_reference.int8_w8a8_linear_ref`. M >= INT_MM_MIN_ROWS."""
    m, k = x.shape
    n = qweight.shape[0]
    if m < INT_MM_MIN_ROWS or k % 8 or n % 8:
        raise ValueError(f"torch._int_mm needs more than 16 rows and K, N multiples of 8, got {m} x {k} x {n}")
    x_q, x_scales = quantize_rows_int8(x)
    qweight, scales = qweight.contiguous(), scales.contiguous()
    acc = torch._int_mm(x_q, qweight.t())  # the (N, K) row-major weight transposed is column-major
    out = torch.empty(m, n, dtype=x.dtype, device=x.device)
    block_m, block_n = 32, 128
    _scale_int32_kernel[(triton.cdiv(m, block_m), triton.cdiv(n, block_n))](
        acc,
        x_scales,
        scales,
        bias if bias is not None else scales,
        out,
        m,
        n,
        acc.stride(0),
        out.stride(0),
        HAS_BIAS=bias is not None,
        BLOCK_M=block_m,
        BLOCK_N=block_n,
    )
    return out


def _quantize_rows(x: torch.Tensor, int8: bool) -> tuple[torch.Tensor, torch.Tensor]:
    m, k = x.shape
    x = x if x.stride(-1) == 1 else x.contiguous()
    q = torch.empty(m, k, dtype=torch.int8 if int8 else torch.float8_e4m3fn, device=x.device)
    scales = torch.empty(m, 1, dtype=torch.float32, device=x.device)
    if m:
        _quantize_rows_kernel[(m,)](
            x, q, scales, k, x.stride(0), q.stride(0), BLOCK_K=min(4096, triton.next_power_of_2(max(k, 16))), INT8=int8
        )
    return q, scales


def dequantize_weight(
    qweight: torch.Tensor,
    scales: torch.Tensor,
    zeros: torch.Tensor | None,
    kind: str,
    group_size: int,
    dtype: torch.dtype,
    out: torch.Tensor | None = None,
) -> torch.Tensor:
    """The (N, K) weight in `dtype` (bf16/fp16; float32 under the interpreter), one launch; `out` reuses a
    buffer of at least N * K elements (the "dequant" backend keeps one per device). int4 in the planes
    packing. Each value is the dequantizing reference's (quant_reference), rounded once."""
    n = scales.shape[0]
    k = qweight.shape[1] * (8 if kind == "int4" else 1)
    out = torch.empty(n, k, dtype=dtype, device=qweight.device) if out is None else out[: n * k].view(n, k)
    probe = torch.empty(0, dtype=dtype, device=qweight.device)
    if kind == "int4":
        if k % INT4_BLOCK_K or group_size % INT4_BLOCK_K:
            raise ValueError(f"int4 dequantization needs K and the group size multiples of {INT4_BLOCK_K}")
        lanes = qweight.contiguous().view(torch.int16)
        block_n, block_k = 64, INT4_BLOCK_K
        args = (lanes, scales.contiguous(), zeros.contiguous(), out, n, k, lanes.stride(0), scales.stride(0),
                zeros.stride(0), out.stride(0))  # fmt: skip
    else:
        block_n, block_k = 32, 128
        qweight = qweight.contiguous()
        args = (qweight, scales, qweight, out, n, k, qweight.stride(0), 1, 1, out.stride(0))
    _dequantize_kernel[(triton.cdiv(n, block_n), triton.cdiv(k, block_k))](
        *args,
        KIND=KINDS[kind],
        GROUP=group_size if kind == "int4" else 1,
        BLOCK_N=block_n,
        BLOCK_K=block_k,
        USE_ASM=_use_asm(probe),
    )
    return out
