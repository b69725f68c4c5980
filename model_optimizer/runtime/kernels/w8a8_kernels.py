"""The W8A8 kinds' own passes around the matmul: activations quantized per token, and the epilogue of
cuBLAS's int8 GEMM (torch._int_mm) that applies both scales. Launched by quant_matmul."""

from __future__ import annotations

import triton
import triton.language as tl

from model_optimizer.runtime.kernels.formats import FP8_MAX

_FP8_MAX = tl.constexpr(FP8_MAX)  # jit functions may only read constexpr globals
_FP8_INV = tl.constexpr(1.0 / FP8_MAX)  # rounded to float32 in the kernel, as torch rounds it
_INT8_MAX = tl.constexpr(127.0)
_INT8_INV = tl.constexpr(1.0 / 127.0)
_RNE = tl.constexpr(12582912.0)
"""1.5 * 2**23: adding then subtracting it rounds a float32 below 2**22 to the nearest integer, ties to
even (torch.round's rule), with no rounding instruction of its own."""


@triton.jit
def _quantize_rows_kernel(x_ptr, q_ptr, scale_ptr, K, stride_xm, stride_qm, BLOCK_K: tl.constexpr,
                          INT8: tl.constexpr):  # fmt: skip
    """One row per program: amax pass, then x / scale clamped and rounded to e4m3, or (INT8) to the
    nearest integer, ties to even, as int8 (row read twice, from L2). scale = amax times the float32
    1/448 (1/127), as quant_reference defines it; x / scale rounds to nearest (div_rn) as torch's
    division does: Triton's `/` on float32 is the approximate division on the GPU. A last-bit
    difference in either flipped codes that sit on a rounding tie (the H200 probe saw x / scale = 76)."""
    QMAX: tl.constexpr = _INT8_MAX if INT8 else _FP8_MAX
    QINV: tl.constexpr = _INT8_INV if INT8 else _FP8_INV
    row = tl.program_id(0).to(tl.int64)
    amax = tl.zeros((BLOCK_K,), dtype=tl.float32)
    for k0 in range(0, K, BLOCK_K):
        offs = k0 + tl.arange(0, BLOCK_K)
        amax = tl.maximum(amax, tl.abs(tl.load(x_ptr + row * stride_xm + offs, mask=offs < K, other=0).to(tl.float32)))
    row_max = tl.max(amax, axis=0)
    scale = tl.where(row_max > 0, row_max * QINV, 1.0)
    tl.store(scale_ptr + row, scale)
    for k0 in range(0, K, BLOCK_K):
        offs = k0 + tl.arange(0, BLOCK_K)
        x = tl.load(x_ptr + row * stride_xm + offs, mask=offs < K, other=0).to(tl.float32)
        q = tl.minimum(tl.maximum(tl.math.div_rn(x, scale), -QMAX), QMAX)  # the e4m3 cast does not saturate
        if INT8:
            q = (q + _RNE) - _RNE  # |q| <= 127: exact ties-to-even rounding; the int8 cast then truncates nothing
        tl.store(q_ptr + row * stride_qm + offs, q.to(q_ptr.dtype.element_ty), mask=offs < K)


@triton.jit(do_not_specialize=["M"])  # every row count of prefill and mixed steps, one compile
def _scale_int32_kernel(acc_ptr, x_scales_ptr, scales_ptr, bias_ptr, out_ptr, M, N, stride_am, stride_om,
                        HAS_BIAS: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):  # fmt: skip
    """out = int32 acc (torch._int_mm's int8 x int8 sums) * token scale * channel scale (+ bias), in
    the output dtype: the W8A8 epilogue of the cuBLAS int8 GEMM, in the reference's order."""
    offs_m = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = tl.program_id(1) * BLOCK_N + tl.arange(0, BLOCK_N)
    m_mask = offs_m < M
    n_mask = offs_n < N
    mask = m_mask[:, None] & n_mask[None, :]
    rows = offs_m.to(tl.int64)[:, None]
    acc = tl.load(acc_ptr + rows * stride_am + offs_n[None, :], mask=mask, other=0).to(tl.float32)
    acc = acc * tl.load(x_scales_ptr + offs_m, mask=m_mask, other=0)[:, None]
    acc = acc * tl.load(scales_ptr + offs_n, mask=n_mask, other=0)[None, :]
    if HAS_BIAS:
        acc += tl.load(bias_ptr + offs_n, mask=n_mask, other=0).to(tl.float32)[None, :]
    tl.store(out_ptr + rows * stride_om + offs_n[None, :], acc.to(out_ptr.dtype.element_ty), mask=mask)
