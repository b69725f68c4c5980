"""Triton program for weight-quantized linear layers: x (M, K) @ dequantize(W (N, K)).T, dequantized in-kernel.

Same result as `quant_reference.w8a16_linear_ref` / `w4a16_linear_ref` / `fp8_linear_ref` (and, for
the W8A8 kinds, `fp8_w8a8_linear_ref` / `int8_w8a8_linear_ref`): the weight bytes (int8, fp8 e4m3 or packed int4) are read
once, widened in registers and never written back. Decode is bound by weight bytes, so the program
is built around streaming them:

- Weight-stationary, "swap AB": a program owns a (BLOCK_N, K-slice) strip of the weight and computes
  out.T[n-tile, m-tile] = W_tile @ x.T. The weight is the big operand of `tl.dot` (BLOCK_N rows, 64+
  on Hopper's warp-group MMA), the few activation rows are the small one (BLOCK_M = 16 serves any
  decode batch up to 16 at the cost of one). Row tiles of the same weight tile are neighbouring
  programs, so a weight tile is read from HBM once per launch and from L2 by the others (prefill).
  The widened weight feeds the MMA from registers (Hopper's wgmma takes its A operand there), so it
  never goes through shared memory: Triton loads the packed bytes from shared memory straight into
  the operand's register layout and the conversion (quant_dequant) runs in that layout.
- The conversion is the cost: a GEMV or dot here is bound by the instructions that widen each weight,
  so they are bit operations on two values per 32-bit register (quant_dequant; about 2 instructions
  a weight for int4, 2.5 for int8 and e4m3, against 3-4 before).
- int4 reads the planes packing (quant_reference): per 128-column block, nibble p of every 16-bit
  lane is a plane of 32 consecutive columns, so a block is four 32-deep dots against contiguous
  activation columns, and a plane is dequantized whole ((q - zero) * scale, one rounding to the
  activation dtype) before its dot: one accumulator runs through all of K (or one per plane, summed
  at the end, so that the four dots issue asynchronously: `ACCS`, QuantTiles.accumulators).
- W8A8 (KIND 3 fp8, KIND 5 int8): activations quantized per token beforehand (`w8a8_kernels`),
  both operands e4m3 (an fp8 MMA into float32) or int8 (an int8 MMA into int32, exact: |sum| <=
  K * 127**2 < 2**31 for K up to 133k), nothing to widen; scales of weight row and token applied at
  the end.
- Split-K: when the output tiles cannot fill the GPU (Llama's o_proj at BLOCK_N 64: 64 tiles for 132
  SMs; Qwen3-0.6B's at N = 1024: 16), K is cut into `num_splits` slices. Splits write float32
  partials; the last program of a tile to finish (counted with an atomic) adds them in split order
  and writes the output, then resets its counter for the next launch (CUDA-graph replays included).
  One launch per linear, no memset and no reduction kernel, and the sum is deterministic.
- BLOCK_M == 1 is a CUDA-core GEMV for one row (M == 1): multiply-adds into a (BLOCK_N, columns)
  float32 accumulator reduced once at the end, no tensor cores. Widening is bit tricks: int8
  through the float 2**23 + 128 + b (no quarter-rate I2F), int4 nibbles masked in place into a
  float's mantissa (no shift). Which of GEMV and dot wins at M == 1 depends on the shape;
  `quant_tiles` holds the measured choice.
- EVEN_K / EVEN_N (K and N multiples of the tile, as in every real model) drop the masks.

Scales: int8 and fp8 are per output channel, applied once to the accumulator.
"""

from __future__ import annotations

import triton
import triton.language as tl

from model_optimizer.runtime.kernels import pdl
from model_optimizer.runtime.kernels.dots import dot
from model_optimizer.runtime.kernels.fused_ops import round_to, silu_mul
from model_optimizer.runtime.kernels.quant_dequant import bytes_operand, int4_plane

KINDS = {"int8": 0, "fp8": 1, "int4": 2, "fp8_w8a8": 3, "bf16": 4, "int8_w8a8": 5}
"""Weight formats, as the KIND constexpr of the kernel (fp8_w8a8 / int8_w8a8: e4m3 / int8 weights and
activations; bf16: an unquantized weight in the activations' dtype, for the skinny shapes cuBLAS is
slow at)."""
W8A8_KINDS = {"fp8": "fp8_w8a8", "int8": "int8_w8a8"}
"""Weight formats with a W8A8 kind: the weight's format -> the kernel's kind."""
INT4_BLOCK_K = 128
"""int4 K tiles are made of 128-column blocks of the planes packing, each inside one group."""


@triton.jit
def _bytes_tile(w_ptr, rows, n_mask, offs_k, K, KIND: tl.constexpr, EVEN_K: tl.constexpr):
    """(BLOCK_N, BLOCK_K) int8 or fp8 weights; masked lanes read 0 (an undefined fp8 byte could be NaN)."""
    mask = n_mask[:, None]
    if not EVEN_K:
        mask = mask & (offs_k[None, :] < K)
    if KIND == 1 or KIND == 3 or KIND == 4:
        w = tl.load(w_ptr + rows + offs_k[None, :], mask=mask, other=0.0)
    else:
        w = tl.load(w_ptr + rows + offs_k[None, :], mask=mask, other=0)
    return w


@triton.jit
def _bytes_next(w_ptr, rows, n_mask, k0, k_end, KIND: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr):
    """The GEMV's prefetch: the (BLOCK_N, BLOCK_K) tile at k0, or nothing read (zeros) once k0 reaches
    k_end; one condition a tile (not a column) keeps the 16-byte vectors."""
    more = (tl.zeros((BLOCK_K,), tl.int32) + k0) < k_end
    mask = n_mask[:, None] & more[None, :]
    offs_k = tl.multiple_of(k0, BLOCK_K) + tl.arange(0, BLOCK_K)
    if KIND == 1 or KIND == 4:
        w = tl.load(w_ptr + rows + offs_k[None, :], mask=mask, other=0.0, eviction_policy="evict_first")
    else:
        w = tl.load(w_ptr + rows + offs_k[None, :], mask=mask, other=0, eviction_policy="evict_first")
    return w


@triton.jit
def _x_cols(x_ptr, offs_m, offs_k, M, K, stride_xm, EVEN_K: tl.constexpr):
    """x.T tile (len(offs_k), BLOCK_M); rows past M and columns past K read 0."""
    mask = offs_m[None, :] < M
    if not EVEN_K:
        mask = mask & (offs_k[:, None] < K)
    return tl.load(x_ptr + offs_m.to(tl.int64)[None, :] * stride_xm + offs_k[:, None], mask=mask, other=0.0)


@triton.jit
def _dot_bytes(x_ptr, w_ptr, rows, n_mask, offs_m, k_start, k_end, M, K, stride_xm,
               KIND: tl.constexpr, EVEN_K: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
               BLOCK_K: tl.constexpr, DOT_DTYPE: tl.constexpr, USE_ASM: tl.constexpr):  # fmt: skip
    """(BLOCK_N, BLOCK_M) = W[n-tile, k_start:k_end] @ x[m-tile, k_start:k_end].T for int8 / fp8 / W8A8.
    int8 x int8 (KIND 5) sums exactly in int32, made float32 once at the end."""
    ACC_DTYPE: tl.constexpr = tl.int32 if KIND == 5 else tl.float32
    acc = tl.zeros((BLOCK_N, BLOCK_M), dtype=ACC_DTYPE)
    for k0 in range(k_start, k_end, BLOCK_K):
        offs_k = tl.multiple_of(k0, BLOCK_K) + tl.arange(0, BLOCK_K)
        w = _bytes_tile(w_ptr, rows, n_mask, offs_k, K, KIND, EVEN_K)
        x = _x_cols(x_ptr, offs_m, offs_k, M, K, stride_xm, EVEN_K)
        if KIND == 5:
            acc = tl.dot(w, x, acc, out_dtype=tl.int32)
        elif KIND >= 3:  # both e4m3 (the fp8 MMA as they are; fp32 under the interpreter), or a bf16 weight
            acc = dot(w.to(DOT_DTYPE), x.to(DOT_DTYPE), acc, DOT_DTYPE)
        else:
            acc = dot(bytes_operand(w, KIND, x_ptr.dtype.element_ty, DOT_DTYPE, USE_ASM), x.to(DOT_DTYPE), acc,
                      DOT_DTYPE)  # fmt: skip
    return acc.to(tl.float32)


@triton.jit
def _int4_group(scales_ptr, zeros_ptr, offs_n, n_mask, kc, k_end, stride_sn, stride_zn, GROUP: tl.constexpr):
    """Zero points (uint8) and scales of the group holding column kc, (BLOCK_N,) each; nothing read
    once kc reaches k_end (the prefetch past a split's last block)."""
    mask = n_mask & ((tl.zeros_like(offs_n) + kc) < k_end)  # a tensor condition (the interpreter's masks)
    offs_n64 = offs_n.to(tl.int64)
    zero = tl.load(zeros_ptr + offs_n64 * stride_zn + kc // GROUP, mask=mask, other=0)
    scale = tl.load(scales_ptr + offs_n64 * stride_sn + kc // GROUP, mask=mask, other=0)
    return zero, scale


@triton.jit
def _dot_int4(x_ptr, w_ptr, scales_ptr, zeros_ptr, offs_n, rows, n_mask, offs_m, k_start, k_end, M, K,
              stride_xm, stride_sn, stride_zn, GROUP: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
              DOT_DTYPE: tl.constexpr, USE_ASM: tl.constexpr, ACCS: tl.constexpr = 1):  # fmt: skip
    """(BLOCK_N, BLOCK_M) int4 partial product over [k_start, k_end), 128-column blocks of the planes
    packing (w_ptr: int16 lanes, `rows` in lanes). Per block, four plane dots of 32 columns each: the
    plane's weights are dequantized whole, (q - zero) * scale rounded to the activation dtype, before
    the dot, so an accumulator runs through all of K and the tensor-core MMAs chain without a wait
    for a per-group rescale. The block's zero points and scales are loaded one block ahead
    (they are too small for Triton's cp.async pipelining, which covers the lanes and x).
    ACCS 4: each plane's dot into an accumulator of its own, summed after the loop. A dot that feeds the
    next one is waited for at once (Triton waits for a register-operand MMA whose result is used in the
    loop), so with one accumulator the widening of plane p + 1 starts only when plane p's MMAs are done;
    with four, the dots are independent and issue asynchronously (quant_tiles.QuantTiles.accumulators)."""
    X_DTYPE: tl.constexpr = x_ptr.dtype.element_ty
    lane = tl.arange(0, 32)
    acc = tl.zeros((BLOCK_N, BLOCK_M), dtype=tl.float32)
    acc1 = tl.zeros((BLOCK_N, BLOCK_M), dtype=tl.float32)  # planes 1-3 with ACCS 4 (unused, and dropped, with 1)
    acc2 = tl.zeros((BLOCK_N, BLOCK_M), dtype=tl.float32)
    acc3 = tl.zeros((BLOCK_N, BLOCK_M), dtype=tl.float32)
    next_zero, next_scale = _int4_group(scales_ptr, zeros_ptr, offs_n, n_mask, k_start, k_end, stride_sn,
                                        stride_zn, GROUP)  # fmt: skip
    for k0 in range(k_start, k_end, 128):  # K is a multiple of 128: no block reaches past it
        k0 = tl.multiple_of(k0, 128)
        zero, scale = next_zero, next_scale
        next_zero, next_scale = _int4_group(scales_ptr, zeros_ptr, offs_n, n_mask, k0 + 128, k_end, stride_sn,
                                            stride_zn, GROUP)  # fmt: skip
        lanes = tl.load(w_ptr + rows + (k0 // 4 + lane)[None, :], mask=n_mask[:, None], other=0)  # (BLOCK_N, 32)
        for p in tl.static_range(4):
            w = int4_plane(lanes, zero, scale, p, X_DTYPE, DOT_DTYPE, USE_ASM)  # columns k0 + 32 p + lane
            x = _x_cols(x_ptr, offs_m, k0 + 32 * p + lane, M, K, stride_xm, True)  # (32, BLOCK_M)
            if ACCS == 1 or p == 0:
                acc = dot(w, x.to(DOT_DTYPE), acc, DOT_DTYPE)
            elif p == 1:
                acc1 = dot(w, x.to(DOT_DTYPE), acc1, DOT_DTYPE)
            elif p == 2:
                acc2 = dot(w, x.to(DOT_DTYPE), acc2, DOT_DTYPE)
            else:
                acc3 = dot(w, x.to(DOT_DTYPE), acc3, DOT_DTYPE)
    if ACCS == 4:
        acc = (acc + acc1) + (acc2 + acc3)
    return acc


@triton.jit
def _int8_as_f32(w):
    """int8 -> float32 exactly without I2F (a quarter-rate instruction on Hopper that caps the GEMV near
    4 bytes per I2F slot): 0x4B000080 + b is the float 2**23 + 128 + b, one subtraction leaves b."""
    return (w.to(tl.int32) + 0x4B000080).to(tl.float32, bitcast=True) - 8388736.0


@triton.jit
def _int4_tile(w_ptr, scales_ptr, zeros_ptr, offs_n, rows, n_mask, k0, k_limit, stride_sn, stride_zn,
               GROUP: tl.constexpr, MASK_K: tl.constexpr, BLOCK_K: tl.constexpr):  # fmt: skip
    """Words (BLOCK_N, CHUNKS, 16), zero points and scales (BLOCK_N, CHUNKS) of the K tile at k0;
    slices at or past k_limit read 0 and no memory when MASK_K (a mask per slice keeps the 16-byte
    vectors)."""
    CHUNKS: tl.constexpr = BLOCK_K // 128
    chunk = tl.arange(0, CHUNKS)
    kc = k0 + 128 * chunk  # (CHUNKS,) first column of each group slice
    offs_w = tl.max_contiguous(tl.multiple_of(k0 // 8 + 16 * chunk[:, None] + tl.arange(0, 16)[None, :], [16, 16]),
                               [1, 16])  # fmt: skip
    w_mask = n_mask[:, None, None]
    g_mask = n_mask[:, None]
    if MASK_K:
        w_mask = w_mask & (kc < k_limit)[None, :, None]
        g_mask = g_mask & (kc < k_limit)[None, :]
    words = tl.load(w_ptr + rows[:, :, None] + offs_w[None, :, :], mask=w_mask, other=0, eviction_policy="evict_first")
    group = (kc // GROUP)[None, :]
    offs_n64 = offs_n.to(tl.int64)[:, None]
    zero = tl.load(zeros_ptr + offs_n64 * stride_zn + group, mask=g_mask, other=0)
    scale = tl.load(scales_ptr + offs_n64 * stride_sn + group, mask=g_mask, other=0)
    return words, zero, scale


@triton.jit
def _gemv_int4(x_ptr, w_ptr, scales_ptr, zeros_ptr, offs_n, rows, n_mask, row, k_start, k_end, K, stride_sn,
               stride_zn, GROUP: tl.constexpr, EVEN_K: tl.constexpr, BLOCK_N: tl.constexpr,
               BLOCK_K: tl.constexpr, PREFETCH: tl.constexpr):  # fmt: skip
    """(BLOCK_N,) int4 partial product of one row on CUDA cores. A K tile is CHUNKS 128-column group
    slices read by one (BLOCK_N, CHUNKS, 16)-word load (16-byte vectors): at 4 bits a weight, one
    128-column slice is only 64 bytes a row, too little in flight per program to cover HBM latency.
    PREFETCH loads the next tile into registers before working on this one (Triton pipelines only
    loads that feed tl.dot), so a program's loads and arithmetic overlap."""
    CHUNKS: tl.constexpr = BLOCK_K // 128
    WORDS: tl.constexpr = 16
    chunk = tl.arange(0, CHUNKS)
    word = tl.arange(0, WORDS)
    acc = tl.zeros((BLOCK_N, CHUNKS, WORDS), dtype=tl.float32)
    if PREFETCH:
        next_words, next_zero, next_scale = _int4_tile(w_ptr, scales_ptr, zeros_ptr, offs_n, rows, n_mask, k_start,
                                                       k_end, stride_sn, stride_zn, GROUP, True, BLOCK_K)  # fmt: skip
    for k0 in range(k_start, k_end, BLOCK_K):
        k0 = tl.multiple_of(k0, BLOCK_K)
        if PREFETCH:  # this tile came with the last iteration; the next one (none past k_end) goes out now
            words, zero, scale = next_words, next_zero, next_scale
            next_words, next_zero, next_scale = _int4_tile(w_ptr, scales_ptr, zeros_ptr, offs_n, rows, n_mask,
                                                           k0 + BLOCK_K, k_end, stride_sn, stride_zn, GROUP, True,
                                                           BLOCK_K)  # fmt: skip
        else:  # slices past K (K a multiple of the group size, not of BLOCK_K) read 0
            words, zero, scale = _int4_tile(w_ptr, scales_ptr, zeros_ptr, offs_n, rows, n_mask, k0, K, stride_sn,
                                            stride_zn, GROUP, not EVEN_K, BLOCK_K)  # fmt: skip
        kc = k0 + 128 * chunk
        zero = zero.to(tl.float32)[:, :, None]
        high = words >> 12  # nibbles 5..7 at bits 8..19
        part = tl.zeros((BLOCK_N, CHUNKS, WORDS), dtype=tl.float32)
        offs_x = kc[:, None] + 2 * word[None, :]  # (CHUNKS, WORDS): column of nibble 0 of each word
        x_ptrs = x_ptr + row + offs_x  # once per tile: the eight nibbles below add a constant
        for j in tl.static_range(8):  # planes packing: nibble j of word i is column 32 (j % 4) + 2 i + j // 4
            if EVEN_K:
                x = tl.load(x_ptrs + (32 * (j % 4) + j // 4)).to(tl.float32)
            else:
                x = tl.load(x_ptrs + (32 * (j % 4) + j // 4), mask=offs_x + (32 * (j % 4) + j // 4) < K,
                            other=0).to(tl.float32)  # fmt: skip
            # nibble in place, no shift: (bits & mask) | 2**23's exponent is the float 2**23 + q * 16**s
            # (exact below bit 23: s <= 4), minus 2**23 + zero * 16**s is (q - zero) * 16**s; x / 16**s
            # is exact too, so the product is the one of the plain q - zero. Three operations a nibble
            # (one LOP3, a subtraction, an FMA) instead of four: the GEMV is near the ALU's limit.
            if j < 5:
                q = ((words & (0xF << (4 * j))) | 0x4B000000).to(tl.float32, bitcast=True)
                part += (q - (zero * (1 << (4 * j)) + 8388608.0)) * (x * (1.0 / (1 << (4 * j))))[None, :, :]
            else:
                q = ((high & (0xF << (4 * j - 12))) | 0x4B000000).to(tl.float32, bitcast=True)
                part += (q - (zero * (1 << (4 * j - 12)) + 8388608.0)) * (x * (1.0 / (1 << (4 * j - 12))))[None, :, :]
        acc += part * scale.to(tl.float32)[:, :, None]
    return tl.sum(tl.sum(acc, axis=2), axis=1)


@triton.jit
def _gemv_row(x_ptr, w_ptr, scales_ptr, zeros_ptr, offs_n, rows, n_mask, row, k_start, k_end, K, stride_sn,
              stride_zn, KIND: tl.constexpr, GROUP: tl.constexpr, EVEN_K: tl.constexpr, BLOCK_N: tl.constexpr,
              BLOCK_K: tl.constexpr, PREFETCH: tl.constexpr, PDL: tl.constexpr):  # fmt: skip
    """(BLOCK_N, 1) partial product of one input row on CUDA cores (BLOCK_M == 1). With PREFETCH (int8,
    fp8, bf16) the first weight tile is in flight before the wait for the kernel before (pdl.py)."""
    if KIND == 2:
        acc = _gemv_int4(x_ptr, w_ptr, scales_ptr, zeros_ptr, offs_n, rows, n_mask, row, k_start, k_end, K,
                         stride_sn, stride_zn, GROUP, EVEN_K, BLOCK_N, BLOCK_K, PREFETCH)  # fmt: skip
    else:
        # the accumulator is at most 256 columns wide (registers); a wider K tile is 256-column pieces
        # loaded in one straight-line block, so their loads are in flight together
        SUB_K: tl.constexpr = BLOCK_K if BLOCK_K < 256 else 256
        acc2 = tl.zeros((BLOCK_N, SUB_K), dtype=tl.float32)
        if PREFETCH:  # one piece a tile, K a multiple of it (quant_matmul.prefetches): next tile in flight
            w_next = _bytes_next(w_ptr, rows, n_mask, k_start, k_end, KIND, BLOCK_N, BLOCK_K)
            pdl.wait_then_release(PDL)
        for k0 in range(k_start, k_end, BLOCK_K):
            if PREFETCH:
                offs_k = tl.multiple_of(k0, BLOCK_K) + tl.arange(0, BLOCK_K)
                w = w_next
                w_next = _bytes_next(w_ptr, rows, n_mask, k0 + BLOCK_K, k_end, KIND, BLOCK_N, BLOCK_K)
                x = tl.load(x_ptr + row + offs_k)
                w = _int8_as_f32(w) if KIND == 0 else w.to(tl.float32)
                acc2 += w * x.to(tl.float32)[None, :]
            for c in tl.static_range(0 if PREFETCH else BLOCK_K // SUB_K):
                offs_k = tl.multiple_of(k0 + c * SUB_K, SUB_K) + tl.arange(0, SUB_K)
                w = _bytes_tile(w_ptr, rows, n_mask, offs_k, K, KIND, EVEN_K)
                if EVEN_K:
                    x = tl.load(x_ptr + row + offs_k)
                else:
                    x = tl.load(x_ptr + row + offs_k, mask=offs_k < K, other=0)
                w = _int8_as_f32(w) if KIND == 0 else w.to(tl.float32)
                acc2 += w * x.to(tl.float32)[None, :]
        acc = tl.sum(acc2, axis=1)
    return acc[:, None]


@triton.jit(do_not_specialize=["M"])  # one compile serves every row count (engine start-up, the sweep)
def _quant_matmul_kernel(x_ptr, w_ptr, scales_ptr, zeros_ptr, x_scales_ptr, bias_ptr, out_ptr, part_ptr, count_ptr,
                         M, N, K, stride_xm, stride_wn, stride_sn, stride_zn, stride_om, k_per_split, num_splits,
                         KIND: tl.constexpr, GROUP: tl.constexpr, HAS_BIAS: tl.constexpr, EVEN_K: tl.constexpr,
                         EVEN_N: tl.constexpr, DOT_DTYPE: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                         BLOCK_K: tl.constexpr, USE_ASM: tl.constexpr, PREFETCH: tl.constexpr,
                         PDL: tl.constexpr = False, GATED: tl.constexpr = False, ACCS: tl.constexpr = 1):  # fmt: skip
    """GATED (the GEMV only): the weight is [gate | up] (N rows, N / 2 each) and the output silu(gate) * up
    (N / 2 columns); a program's BLOCK_N rows are BLOCK_N / 2 of gate and the matching rows of up."""
    if BLOCK_M != 1 or KIND == 2 or not PREFETCH:  # else _gemv_row waits after its first weight load
        pdl.wait_then_release(PDL)
    pid = tl.program_id(0)
    pid_k = tl.program_id(1)
    num_m = tl.cdiv(M, BLOCK_M)
    pid_m = pid % num_m  # the row tiles of one weight tile run side by side: HBM once, L2 for the rest
    pid_n = pid // num_m
    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    if GATED:
        HALF_N: tl.constexpr = BLOCK_N // 2
        lanes = tl.arange(0, BLOCK_N)
        cols = pid_n * HALF_N + lanes % HALF_N  # the output column of each row
        offs_n = tl.where(lanes < HALF_N, cols, N // 2 + cols)
        n_mask = cols < N // 2
    else:
        offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
        if EVEN_N:  # every real model shape: an all-true mask, which the compiler folds away
            n_mask = tl.full((BLOCK_N,), 1, tl.int1)
        else:
            n_mask = offs_n < N
    rows = offs_n.to(tl.int64)[:, None] * stride_wn
    k_start = pid_k * k_per_split
    k_end = tl.minimum(k_start + k_per_split, K)
    if BLOCK_M == 1:
        acc = _gemv_row(x_ptr, w_ptr, scales_ptr, zeros_ptr, offs_n, rows, n_mask, pid_m.to(tl.int64) * stride_xm,
                        k_start, k_end, K, stride_sn, stride_zn, KIND, GROUP, EVEN_K, BLOCK_N, BLOCK_K,
                        PREFETCH, PDL)  # fmt: skip
    elif KIND == 2:
        acc = _dot_int4(x_ptr, w_ptr, scales_ptr, zeros_ptr, offs_n, rows, n_mask, offs_m, k_start, k_end, M, K,
                        stride_xm, stride_sn, stride_zn, GROUP, BLOCK_M, BLOCK_N, DOT_DTYPE, USE_ASM, ACCS)  # fmt: skip
    else:
        acc = _dot_bytes(x_ptr, w_ptr, rows, n_mask, offs_m, k_start, k_end, M, K, stride_xm, KIND, EVEN_K,
                         BLOCK_M, BLOCK_N, BLOCK_K, DOT_DTYPE, USE_ASM)  # fmt: skip
    if KIND != 2 and KIND != 4:  # per-channel scale, once per tile
        acc = acc * tl.load(scales_ptr + offs_n, mask=n_mask, other=0).to(tl.float32)[:, None]
    if KIND == 3 or KIND == 5:  # and each token's activation scale
        acc = acc * tl.load(x_scales_ptr + offs_m, mask=offs_m < M, other=0)[None, :]
    mask = n_mask[:, None] & (offs_m[None, :] < M)
    out_offs = offs_m.to(tl.int64)[None, :] * stride_om + offs_n[:, None]  # acc is out.T: (BLOCK_N, BLOCK_M)
    if num_splits > 1:  # a runtime value: one compiled kernel serves every split count
        part_offs = offs_m.to(tl.int64)[None, :] * N + offs_n[:, None]
        tl.store(part_ptr + pid_k * M * N + part_offs, acc, mask=mask)
        tl.debug_barrier()  # every thread's partial is stored before this program reports in
        counter = count_ptr + pid
        if tl.atomic_add(counter, 1, sem="acq_rel") == num_splits - 1:  # the last split of this tile sums them
            acc = tl.zeros((BLOCK_N, BLOCK_M), dtype=tl.float32)
            # fixed order: the same sum on every run. Decode tiles unroll it by four, so that the partials'
            # loads are in flight together rather than one L2 round trip per split (larger tiles would spill)
            UNROLL: tl.constexpr = 4 if BLOCK_M * BLOCK_N <= 2048 else 1
            for s in tl.range(num_splits, loop_unroll_factor=UNROLL):
                acc += tl.load(part_ptr + s * M * N + part_offs, mask=mask, other=0, cache_modifier=".cg")
            if HAS_BIAS:
                acc += tl.load(bias_ptr + offs_n, mask=n_mask, other=0).to(tl.float32)[:, None]
            _store_out(out_ptr, acc, offs_m, offs_n, mask, out_offs, pid_n, N, stride_om, GATED, BLOCK_N)
            tl.atomic_xchg(counter, 0)  # ready for the next launch (CUDA-graph replays included)
    else:
        if HAS_BIAS:
            acc += tl.load(bias_ptr + offs_n, mask=n_mask, other=0).to(tl.float32)[:, None]
        _store_out(out_ptr, acc, offs_m, offs_n, mask, out_offs, pid_n, N, stride_om, GATED, BLOCK_N)


@triton.jit
def _store_out(out_ptr, acc, offs_m, offs_n, mask, out_offs, pid_n, N, stride_om, GATED: tl.constexpr,
               BLOCK_N: tl.constexpr):  # fmt: skip
    """The tile's (BLOCK_N, BLOCK_M) float32 results into out; GATED (one row, BLOCK_M == 1): gate and up
    rounded to the output dtype as the unfused matmul stores them, then fused_ops.silu_mul, into the
    BLOCK_N / 2 output columns."""
    dtype = out_ptr.dtype.element_ty
    if GATED:
        HALF_N: tl.constexpr = BLOCK_N // 2
        both = round_to(tl.reshape(acc, (2, HALF_N)), dtype).to(tl.float32)  # row 0: gate, row 1: up
        gate, up = tl.split(tl.permute(both, (1, 0)))
        cols = pid_n * HALF_N + tl.arange(0, HALF_N)
        row = tl.max(offs_m, axis=0).to(tl.int64)  # BLOCK_M == 1
        tl.store(out_ptr + row * stride_om + cols, silu_mul(gate, up, dtype), mask=cols < N // 2)
    else:
        tl.store(out_ptr + out_offs, acc.to(dtype), mask=mask)
