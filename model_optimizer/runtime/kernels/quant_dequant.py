"""Weights widened into tensor-core operands in registers: int4 planes, int8 and e4m3 bytes.

The tensor-core programs of `quant_kernels` are bound by the instructions that turn each weight
into a bf16/fp16 operand, not by the MMA, so each conversion here is a few bit operations on two
values at once (PTX on packed 16-bit pairs: `tl.inline_asm_elementwise(..., pack=2)`), measured in
SASS per weight (benchmarks/quant_sass.py): int4 about 2 instructions a weight (shift, mask-or,
subtract, multiply per pair), int8 2.5, e4m3 2.5 (torch's e4m3 -> bf16 goes through a quarter-rate
F2F a value). USE_ASM is False under the Triton interpreter and before sm_90 (bf16x2 arithmetic):
the same numbers then come from plain Triton operations, which the interpreter tests check.

Exactness (the result equals the dequantizing reference, which rounds the float32 weight once to
the activation dtype):
- int4: 0x4300 | q is the bf16 128 + q (0x6400 | q the fp16 1024 + q); subtracting 128 + zero is
  exact (|q - z| <= 15) and the multiply by the scale (stored in the activation dtype) rounds once.
- int8: byte ^ 0x80 placed in the float 2**23 + u, minus 2**23 + 128, is the byte exactly; one
  rounding-free conversion to bf16/fp16 (|b| <= 128).
- e4m3 -> bf16: sign and the 7 exponent/mantissa bits moved into a bf16 whose exponent field is
  e4m3's (bias 7 instead of 127) is the value times 2**-120, subnormals included; times 2**120
  (exact) restores it. e4m3 -> fp16 is the hardware's cvt of two values.
"""

from __future__ import annotations

import triton
import triton.language as tl

# The PTX is spelled out inside the jit functions: inline_asm_elementwise takes a literal string.
# $0: two results; $1: two packed inputs; int4 $2 / $3: (offset + zero, scale) of each of the two rows.


@triton.jit
def _asm_int4(lanes, offset_zero, scale, P: tl.constexpr, X_DTYPE: tl.constexpr):
    """One PTX block per pair of lanes: (((lane >> 4P) & 0xF) | magic) - (offset + zero), times scale.
    The shift moves nibble P of both lanes down at once; the mask drops what spills between them."""
    args = [lanes, offset_zero, scale]
    if X_DTYPE == tl.bfloat16:
        if P == 0:
            w = tl.inline_asm_elementwise(
                "{ .reg .b32 t; lop3.b32 t, $1, 0x000F000F, 0x43004300, 0xEA; "
                "sub.rn.bf16x2 t, t, $2; mul.rn.bf16x2 $0, t, $3; }",
                "=r,r,r,r", args, dtype=tl.bfloat16, is_pure=True, pack=2)  # fmt: skip
        elif P == 1:
            w = tl.inline_asm_elementwise(
                "{ .reg .b32 t; shr.b32 t, $1, 4; lop3.b32 t, t, 0x000F000F, 0x43004300, 0xEA; "
                "sub.rn.bf16x2 t, t, $2; mul.rn.bf16x2 $0, t, $3; }",
                "=r,r,r,r", args, dtype=tl.bfloat16, is_pure=True, pack=2)  # fmt: skip
        elif P == 2:
            w = tl.inline_asm_elementwise(
                "{ .reg .b32 t; shr.b32 t, $1, 8; lop3.b32 t, t, 0x000F000F, 0x43004300, 0xEA; "
                "sub.rn.bf16x2 t, t, $2; mul.rn.bf16x2 $0, t, $3; }",
                "=r,r,r,r", args, dtype=tl.bfloat16, is_pure=True, pack=2)  # fmt: skip
        else:
            w = tl.inline_asm_elementwise(
                "{ .reg .b32 t; shr.b32 t, $1, 12; lop3.b32 t, t, 0x000F000F, 0x43004300, 0xEA; "
                "sub.rn.bf16x2 t, t, $2; mul.rn.bf16x2 $0, t, $3; }",
                "=r,r,r,r", args, dtype=tl.bfloat16, is_pure=True, pack=2)  # fmt: skip
    else:
        if P == 0:
            w = tl.inline_asm_elementwise(
                "{ .reg .b32 t; lop3.b32 t, $1, 0x000F000F, 0x64006400, 0xEA; "
                "sub.rn.f16x2 t, t, $2; mul.rn.f16x2 $0, t, $3; }",
                "=r,r,r,r", args, dtype=tl.float16, is_pure=True, pack=2)  # fmt: skip
        elif P == 1:
            w = tl.inline_asm_elementwise(
                "{ .reg .b32 t; shr.b32 t, $1, 4; lop3.b32 t, t, 0x000F000F, 0x64006400, 0xEA; "
                "sub.rn.f16x2 t, t, $2; mul.rn.f16x2 $0, t, $3; }",
                "=r,r,r,r", args, dtype=tl.float16, is_pure=True, pack=2)  # fmt: skip
        elif P == 2:
            w = tl.inline_asm_elementwise(
                "{ .reg .b32 t; shr.b32 t, $1, 8; lop3.b32 t, t, 0x000F000F, 0x64006400, 0xEA; "
                "sub.rn.f16x2 t, t, $2; mul.rn.f16x2 $0, t, $3; }",
                "=r,r,r,r", args, dtype=tl.float16, is_pure=True, pack=2)  # fmt: skip
        else:
            w = tl.inline_asm_elementwise(
                "{ .reg .b32 t; shr.b32 t, $1, 12; lop3.b32 t, t, 0x000F000F, 0x64006400, 0xEA; "
                "sub.rn.f16x2 t, t, $2; mul.rn.f16x2 $0, t, $3; }",
                "=r,r,r,r", args, dtype=tl.float16, is_pure=True, pack=2)  # fmt: skip
    return w


@triton.jit
def _asm_bytes(w, KIND: tl.constexpr, X_DTYPE: tl.constexpr):
    """Two int8 / e4m3 bytes (the low half of $1) -> two bf16 / fp16 values ($0)."""
    if KIND == 0 and X_DTYPE == tl.bfloat16:  # byte ^ 0x80 into the float 2**23 + u, minus 2**23 + 128
        out = tl.inline_asm_elementwise(
            "{ .reg .b32 a, f0, f1; xor.b32 a, $1, 0x8080; "
            "prmt.b32 f0, a, 0x4B000000, 0x7540; prmt.b32 f1, a, 0x4B000000, 0x7541; "
            "sub.f32 f0, f0, 0f4B000080; sub.f32 f1, f1, 0f4B000080; cvt.rn.bf16x2.f32 $0, f1, f0; }",
            "=r,r", [w], dtype=tl.bfloat16, is_pure=True, pack=2)  # fmt: skip
    elif KIND == 0:
        out = tl.inline_asm_elementwise(
            "{ .reg .b32 a, f0, f1; xor.b32 a, $1, 0x8080; "
            "prmt.b32 f0, a, 0x4B000000, 0x7540; prmt.b32 f1, a, 0x4B000000, 0x7541; "
            "sub.f32 f0, f0, 0f4B000080; sub.f32 f1, f1, 0f4B000080; cvt.rn.f16x2.f32 $0, f1, f0; }",
            "=r,r", [w], dtype=tl.float16, is_pure=True, pack=2)  # fmt: skip
    elif X_DTYPE == tl.bfloat16:  # each byte at the top of a half, moved down 4: bf16 bits of value * 2**-120
        out = tl.inline_asm_elementwise(
            "{ .reg .b32 h, t; prmt.b32 h, $1, 0, 0x1404; shr.b32 t, h, 4; and.b32 t, t, 0x07F007F0; "
            "and.b32 h, h, 0x80008000; or.b32 t, t, h; mov.b32 h, 0x7B807B80; mul.rn.bf16x2 $0, t, h; }",
            "=r,r", [w.to(tl.int8, bitcast=True)], dtype=tl.bfloat16, is_pure=True, pack=2)  # fmt: skip
    else:
        out = tl.inline_asm_elementwise(
            "{ .reg .b16 lo, hi; mov.b32 {lo, hi}, $1; cvt.rn.f16x2.e4m3x2 $0, lo; }",
            "=r,r", [w.to(tl.int8, bitcast=True)], dtype=tl.float16, is_pure=True, pack=2)  # fmt: skip
    return out


@triton.jit
def int4_plane(lanes, zero, scale, P: tl.constexpr, X_DTYPE: tl.constexpr, DOT_DTYPE: tl.constexpr,
               USE_ASM: tl.constexpr):  # fmt: skip
    """(BLOCK_N, 32) operand of plane P (columns 32 P .. 32 P + 31 of a planes block): (q - zero) * scale
    rounded once to X_DTYPE. lanes: (BLOCK_N, 32) int16 of one 128-column block; zero: (BLOCK_N,)
    uint8 codes; scale: (BLOCK_N,) in X_DTYPE (the layer's scales)."""
    if USE_ASM:
        if X_DTYPE == tl.bfloat16:
            offset_zero = (zero.to(tl.int16) | 0x4300).to(tl.bfloat16, bitcast=True)  # 128 + zero, exact
        else:
            offset_zero = (zero.to(tl.int16) | 0x6400).to(tl.float16, bitcast=True)  # 1024 + zero, exact
        shape: tl.constexpr = lanes.shape
        w = _asm_int4(
            lanes,
            tl.broadcast_to(offset_zero[:, None], shape),
            tl.broadcast_to(scale[:, None], shape),
            P,
            X_DTYPE,
        )
    else:
        q = ((lanes >> (4 * P)) & 0xF).to(tl.float32)
        w = ((q - zero.to(tl.float32)[:, None]) * scale.to(tl.float32)[:, None]).to(X_DTYPE)
    return w.to(DOT_DTYPE)


@triton.jit
def bytes_operand(w, KIND: tl.constexpr, X_DTYPE: tl.constexpr, DOT_DTYPE: tl.constexpr, USE_ASM: tl.constexpr):
    """An int8 (KIND 0) or e4m3 (KIND 1) weight tile as a DOT_DTYPE operand, exactly (scales come after the dot)."""
    if USE_ASM:
        out = _asm_bytes(w, KIND, X_DTYPE)
    else:
        out = w.to(tl.float32)
    return out.to(DOT_DTYPE)


@triton.jit
def _dequantize_kernel(w_ptr, scales_ptr, zeros_ptr, out_ptr, N, K, stride_wn, stride_sn, stride_zn, stride_on,
                       KIND: tl.constexpr, GROUP: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
                       USE_ASM: tl.constexpr):  # fmt: skip
    """The whole weight in the activation dtype (out_ptr's), for a dense matmul at prefill sizes: each
    value as the dequantizing reference rounds it. int4 (KIND 2) in the planes packing (w_ptr: int16
    lanes), one 128-column block a program column; int8 / e4m3 (KIND 0 / 1) BLOCK_K columns."""
    X_DTYPE: tl.constexpr = out_ptr.dtype.element_ty
    offs_n = tl.program_id(0) * BLOCK_N + tl.arange(0, BLOCK_N)
    n_mask = offs_n < N
    offs_n64 = offs_n.to(tl.int64)
    k0 = tl.program_id(1) * BLOCK_K
    if KIND == 2:
        lane = tl.arange(0, 32)
        lanes = tl.load(w_ptr + offs_n64[:, None] * stride_wn + (k0 // 4 + lane)[None, :], mask=n_mask[:, None])
        zero = tl.load(zeros_ptr + offs_n64 * stride_zn + k0 // GROUP, mask=n_mask, other=0)
        scale = tl.load(scales_ptr + offs_n64 * stride_sn + k0 // GROUP, mask=n_mask, other=0)
        for p in tl.static_range(4):
            w = int4_plane(lanes, zero, scale, p, X_DTYPE, X_DTYPE, USE_ASM)
            tl.store(out_ptr + offs_n64[:, None] * stride_on + (k0 + 32 * p + lane)[None, :], w, mask=n_mask[:, None])
    else:
        offs_k = k0 + tl.arange(0, BLOCK_K)
        mask = n_mask[:, None] & (offs_k[None, :] < K)
        if KIND == 1:
            w = tl.load(w_ptr + offs_n64[:, None] * stride_wn + offs_k[None, :], mask=mask, other=0.0)
        else:
            w = tl.load(w_ptr + offs_n64[:, None] * stride_wn + offs_k[None, :], mask=mask, other=0)
        scale = tl.load(scales_ptr + offs_n, mask=n_mask, other=0).to(tl.float32)
        w = (w.to(tl.float32) * scale[:, None]).to(X_DTYPE)  # one rounding of the float32 product
        tl.store(out_ptr + offs_n64[:, None] * stride_on + offs_k[None, :], w, mask=mask)
