"""Triton programs for weight-quantized linear layers: x (M, K) @ dequantize(W (N, K)).T, dequantized in-kernel.

Same result as `quant_reference.w8a16_linear_ref` / `w4a16_linear_ref` / `fp8_linear_ref`: the weight
bytes (int8, fp8 e4m3 or packed int4) are read once, widened in registers and never written back,
which is the point: decode is bound by weight bytes, so a 4-bit weight is read in a quarter of the
time of a bf16 one.

One program computes a (BLOCK_M, BLOCK_N) tile of the output over a slice of K. Three launch shapes
of the same kernel (`quant_matmul.choose_tiles` picks one, `quant_matmul.quant_matmul` launches):
- M == 1 (decode at batch 1): BLOCK_M = 1, a multiply-add GEMV without tensor cores that reads the
  weights as int32 words and widens them with bit operations (`_gemv_words`): at batch 1 the H200 has
  to widen about 9.6 billion int4 values per ms to keep up with its memory (4.8 TB/s), twice what its
  int-to-float conversion units deliver (16 per clock per SM), so no conversion instruction is used;
- 1 < M <= 16 (small decode batches): BLOCK_M = 16 rows (masked) through tl.dot;
- M > 16 (prefill): 64 x 128 or 128 x 128 tiles in grouped order, so neighbouring programs share
  weight tiles in L2.
The decode shapes split K when the output tiles alone cannot fill the GPU (Llama's o_proj at
N = 4096 gives 128 tiles of 32 rows for 132 SMs; Qwen3-0.6B's at N = 1024 only 32). Splits write
float32 partials; the last program of a tile to finish (counted with an atomic) adds them in split order
and writes the output, then resets its counter for the next launch. One launch per linear, no
memset and no reduction kernel: at batch 1 each extra launch would cost about as much as the
matmul of a small layer, and the result stays deterministic.

Scales: int8 and fp8 are per output channel, applied once to the accumulator; an int4 group
(G a multiple of BLOCK_K) is constant over a tile, so the dot takes the nibbles exactly (as
offset + q, made by bit operations), x @ (q - zero) = x @ (offset + q) - rowsum(x) (offset + zero),
and the group's scale multiplies the tile's partial product.
`_quantize_rows_fp8_kernel` is the per-token activation quantization in front of the fp8 W8A8 path.
"""

from __future__ import annotations

import triton
import triton.language as tl

KINDS = {"int8": 0, "fp8": 1, "int4": 2}
"""Weight formats, as the KIND constexpr of the kernel."""


@triton.jit
def _weight_tile(
    w_ptr,
    offs_n,
    k0,
    N,
    K,
    stride_wn,
    KIND: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_K: tl.constexpr,
    DOT_DTYPE: tl.constexpr,
):
    """(BLOCK_N, BLOCK_K) weight tile at columns k0.. in DOT_DTYPE, exact: int8 and fp8 values; for int4
    offset + q (zero and scale applied by the caller), where the offset makes q a float by bit operations:
    0x4300 | q is the bf16 128 + q, 0x6400 | q the fp16 1024 + q, 0x4B000000 | q the float32 2**23 + q."""
    n_mask = offs_n < N
    rows = offs_n.to(tl.int64)[:, None] * stride_wn
    if KIND == 2:
        words_k = tl.multiple_of(k0 // 8, BLOCK_K // 8) + tl.arange(0, BLOCK_K // 8)
        mask = n_mask[:, None] & (words_k[None, :] < K // 8)
        words = tl.load(w_ptr + rows + words_k[None, :], mask=mask, other=0)  # (BLOCK_N, BLOCK_K // 8) int32
        shifts = tl.arange(0, 8) * 4
        q = tl.reshape((words[:, :, None] >> shifts[None, None, :]) & 0xF, (BLOCK_N, BLOCK_K))  # k = 8 * word + j
        if DOT_DTYPE == tl.bfloat16:
            return (q | 0x4300).to(tl.int16).to(tl.bfloat16, bitcast=True)
        elif DOT_DTYPE == tl.float16:
            return (q | 0x6400).to(tl.int16).to(tl.float16, bitcast=True)
        else:
            return (q | 0x4B000000).to(tl.float32, bitcast=True) - 8388608.0
    else:
        offs_k = tl.multiple_of(k0, BLOCK_K) + tl.arange(0, BLOCK_K)
        mask = n_mask[:, None] & (offs_k[None, :] < K)
        if KIND == 1:  # masked fp8 lanes read 0.0: an undefined byte could be NaN, and NaN * 0 is NaN
            w = tl.load(w_ptr + rows + offs_k[None, :], mask=mask, other=0.0)
        else:
            w = tl.load(w_ptr + rows + offs_k[None, :], mask=mask, other=0)
        return w.to(DOT_DTYPE)


@triton.jit
def _group_scale(scales_ptr, offs_n, k0, N, stride_sn, GROUP: tl.constexpr):
    """(BLOCK_N,) float32 int4 scales of the group holding columns k0..k0 + BLOCK_K."""
    return tl.load(scales_ptr + offs_n.to(tl.int64) * stride_sn + k0 // GROUP, mask=offs_n < N, other=0).to(tl.float32)


@triton.jit
def _group_zero_scale(zeros_ptr, scales_ptr, offs_n, k0, k_end, N, stride_zn, stride_sn, GROUP: tl.constexpr):
    """(BLOCK_N,) float32 int4 zeros and scales of the group holding column k0 (zeros past k_end)."""
    mask = (offs_n < N) & (offs_n * 0 + k0 < k_end)  # as a vector: the interpreter rejects a scalar mask term
    rows = offs_n.to(tl.int64)
    zero = tl.load(zeros_ptr + rows * stride_zn + k0 // GROUP, mask=mask, other=0).to(tl.float32)
    scale = tl.load(scales_ptr + rows * stride_sn + k0 // GROUP, mask=mask, other=0).to(tl.float32)
    return zero, scale


@triton.jit
def _split4(x, R: tl.constexpr):
    """(R * 4,) -> the four (R,) vectors x[4 i + j], j = 0..3 (j = 2 a + v)."""
    v0, v1 = tl.split(tl.reshape(x, (R, 2, 2)))
    x0, x2 = tl.split(v0)
    x1, x3 = tl.split(v1)
    return x0, x1, x2, x3


@triton.jit
def _split8(x, R: tl.constexpr):
    """(R * 8,) -> the eight (R,) vectors x[8 i + j], j = 0..7 (j = 4 a + 2 b + v)."""
    v0, v1 = tl.split(tl.reshape(x, (R, 2, 2, 2)))
    v0b0, v0b1 = tl.split(v0)
    v1b0, v1b1 = tl.split(v1)
    x0, x4 = tl.split(v0b0)
    x2, x6 = tl.split(v0b1)
    x1, x5 = tl.split(v1b0)
    x3, x7 = tl.split(v1b1)
    return x0, x1, x2, x3, x4, x5, x6, x7


@triton.jit
def _nibble_times(words, J: tl.constexpr, magic_zero, x):
    """(q_J - zero) * x for nibble J of each word. 0x4B000000 | q is the float 2**23 + q, so one
    subtraction of 2**23 + zero gives q - zero exactly, without a (slow) int-to-float conversion."""
    q = (((words >> (4 * J)) & 0xF) | 0x4B000000).to(tl.float32, bitcast=True)
    return (q - magic_zero[:, None]) * x[None, :]


@triton.jit
def _byte_times(words, J: tl.constexpr, KIND: tl.constexpr, x):
    """Byte J of each word as int8 or e4m3, times x, from bit operations (no conversion instructions)."""
    byte = (words >> (8 * J)) & 0xFF
    if KIND == 0:  # (b + 128) in the mantissa of 2**23: the float 2**23 + 128 + b
        w = (byte ^ 0x4B000080).to(tl.float32, bitcast=True) - 8388736.0
    else:  # e4m3 exponent and mantissa moved into float32's: the value times 2**-120, exact (subnormals too)
        w = (((byte & 0x7F) << 20) | ((byte & 0x80) << 24)).to(tl.float32, bitcast=True) * 1.329227995784916e36
    return w * x[None, :]


@triton.jit
def _gemv_words(
    x_ptr,
    w_ptr,
    scales_ptr,
    zeros_ptr,
    row,
    offs_n,
    k_start,
    k_end,
    N,
    K,
    stride_wn,
    stride_sn,
    stride_zn,
    KIND: tl.constexpr,
    GROUP: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_K: tl.constexpr,
):
    """(1, BLOCK_N) partial product of one input row (M == 1). The weights are read as int32 words
    (8 nibbles or 4 bytes, along K); value j of every word meets x[PER_WORD * i + j], so the tile
    stays in the layout it was loaded in: no reshape, one zero and scale per row and tile. Multiply-adds
    go into a (BLOCK_N, words) float32 accumulator reduced once at the end."""
    PER_WORD: tl.constexpr = 8 if KIND == 2 else 4
    WORDS: tl.constexpr = BLOCK_K // PER_WORD
    n_mask = offs_n < N
    rows = offs_n.to(tl.int64)[:, None] * stride_wn
    acc = tl.zeros((BLOCK_N, WORDS), dtype=tl.float32)
    if KIND == 2:  # loaded one tile ahead: too small for the pipeliner's async copies, they would stall each step
        zero, scale = _group_zero_scale(zeros_ptr, scales_ptr, offs_n, k_start, k_end, N, stride_zn, stride_sn, GROUP)
    # num_stages: the loads of later tiles are in flight (async copies) while this one is multiplied
    for k0 in tl.range(k_start, k_end, BLOCK_K, num_stages=3):
        k0 = tl.multiple_of(k0, BLOCK_K)  # splits start at multiples of BLOCK_K
        offs_w = k0 // PER_WORD + tl.arange(0, WORDS)
        w_mask = n_mask[:, None] & (offs_w[None, :] < K // PER_WORD)
        words = tl.load(w_ptr + rows + offs_w[None, :], mask=w_mask, other=0)  # (BLOCK_N, WORDS) int32
        offs_k = k0 + tl.arange(0, BLOCK_K)
        x = tl.load(x_ptr + row + offs_k, mask=offs_k < K, other=0).to(tl.float32)
        if KIND == 2:
            x0, x1, x2, x3, x4, x5, x6, x7 = _split8(x, WORDS)
            magic_zero = zero + 8388608.0
            group_scale = scale
            zero, scale = _group_zero_scale(
                zeros_ptr, scales_ptr, offs_n, k0 + BLOCK_K, k_end, N, stride_zn, stride_sn, GROUP
            )
            part = _nibble_times(words, 0, magic_zero, x0) + _nibble_times(words, 1, magic_zero, x1)
            part += _nibble_times(words, 2, magic_zero, x2) + _nibble_times(words, 3, magic_zero, x3)
            part += _nibble_times(words, 4, magic_zero, x4) + _nibble_times(words, 5, magic_zero, x5)
            part += _nibble_times(words, 6, magic_zero, x6) + _nibble_times(words, 7, magic_zero, x7)
            acc += part * group_scale[:, None]
        else:
            x0, x1, x2, x3 = _split4(x, WORDS)
            acc += _byte_times(words, 0, KIND, x0) + _byte_times(words, 1, KIND, x1)
            acc += _byte_times(words, 2, KIND, x2) + _byte_times(words, 3, KIND, x3)
    return tl.sum(acc, axis=1)[None, :]


@triton.jit
def _gemm_dot(
    x_ptr,
    w_ptr,
    scales_ptr,
    zeros_ptr,
    offs_m,
    offs_n,
    k_start,
    k_end,
    M,
    N,
    K,
    stride_xm,
    stride_wn,
    stride_sn,
    stride_zn,
    KIND: tl.constexpr,
    GROUP: tl.constexpr,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_K: tl.constexpr,
    DOT_DTYPE: tl.constexpr,
):
    """(BLOCK_M, BLOCK_N) partial product through tl.dot; int4 tiles scaled per group after the dot."""
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    rows = offs_m.to(tl.int64)[:, None] * stride_xm
    for k0 in range(k_start, k_end, BLOCK_K):
        offs_k = tl.multiple_of(k0, BLOCK_K) + tl.arange(0, BLOCK_K)
        x = tl.load(x_ptr + rows + offs_k[None, :], mask=(offs_m[:, None] < M) & (offs_k[None, :] < K), other=0)
        x = x.to(DOT_DTYPE)
        w = tl.trans(_weight_tile(w_ptr, offs_n, k0, N, K, stride_wn, KIND, BLOCK_N, BLOCK_K, DOT_DTYPE))
        if DOT_DTYPE == tl.float32:
            part = tl.dot(x, w, input_precision="ieee")
        else:
            part = tl.dot(x, w)  # (BLOCK_M, BLOCK_N)
        if KIND == 2:
            # x @ (q - zero) = x @ q - rowsum(x) zero: zeros and scales stay (BLOCK_N,) vectors
            zero = tl.load(zeros_ptr + offs_n.to(tl.int64) * stride_zn + k0 // GROUP, mask=offs_n < N, other=0)
            x_sum = tl.sum(x.to(tl.float32), axis=1)
            offset = 128.0 if DOT_DTYPE == tl.bfloat16 else (1024.0 if DOT_DTYPE == tl.float16 else 0.0)
            part = part - x_sum[:, None] * (zero.to(tl.float32) + offset)[None, :]
            acc += part * _group_scale(scales_ptr, offs_n, k0, N, stride_sn, GROUP)[None, :]
        else:
            acc += part
    return acc


@triton.jit
def _quant_matmul_kernel(
    x_ptr,
    w_ptr,
    scales_ptr,
    zeros_ptr,
    bias_ptr,
    out_ptr,
    part_ptr,
    count_ptr,
    M,
    N,
    K,
    stride_xm,
    stride_wn,
    stride_sn,
    stride_zn,
    stride_om,
    k_per_split,
    KIND: tl.constexpr,
    GROUP: tl.constexpr,
    HAS_BIAS: tl.constexpr,
    DOT_DTYPE: tl.constexpr,
    num_splits,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_K: tl.constexpr,
    GROUP_M: tl.constexpr,
):
    pid = tl.program_id(0)
    pid_k = tl.program_id(1)
    num_m, num_n = tl.cdiv(M, BLOCK_M), tl.cdiv(N, BLOCK_N)
    # grouped order: GROUP_M row tiles in a row of programs reuse each weight tile from L2
    per_group = GROUP_M * num_n
    first_m = (pid // per_group) * GROUP_M
    group_rows = tl.minimum(num_m - first_m, GROUP_M)
    pid_m = first_m + (pid % per_group) % group_rows
    pid_n = (pid % per_group) // group_rows
    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    k_start = pid_k * k_per_split
    k_end = tl.minimum(k_start + k_per_split, K)
    if BLOCK_M == 1:
        acc = _gemv_words(
            x_ptr,
            w_ptr,
            scales_ptr,
            zeros_ptr,
            pid_m.to(tl.int64) * stride_xm,
            offs_n,
            k_start,
            k_end,
            N,
            K,
            stride_wn,
            stride_sn,
            stride_zn,
            KIND,
            GROUP,
            BLOCK_N,
            BLOCK_K,
        )
    else:
        acc = _gemm_dot(
            x_ptr,
            w_ptr,
            scales_ptr,
            zeros_ptr,
            offs_m,
            offs_n,
            k_start,
            k_end,
            M,
            N,
            K,
            stride_xm,
            stride_wn,
            stride_sn,
            stride_zn,
            KIND,
            GROUP,
            BLOCK_M,
            BLOCK_N,
            BLOCK_K,
            DOT_DTYPE,
        )
    n_mask = offs_n < N
    if KIND != 2:  # per-channel scale, once per tile
        acc = acc * tl.load(scales_ptr + offs_n, mask=n_mask, other=0).to(tl.float32)[None, :]
    mask = (offs_m[:, None] < M) & n_mask[None, :]
    out_offs = offs_m.to(tl.int64)[:, None] * stride_om + offs_n[None, :]
    if num_splits > 1:  # a runtime value: one compiled kernel serves every split count
        part_offs = offs_m.to(tl.int64)[:, None] * N + offs_n[None, :]
        tl.store(part_ptr + pid_k * M * N + part_offs, acc, mask=mask)
        tl.debug_barrier()  # every thread's partial is stored before this program reports in
        counter = count_ptr + pid_m * num_n + pid_n
        if tl.atomic_add(counter, 1, sem="acq_rel") == num_splits - 1:  # the last split of this tile sums them
            acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
            for s in range(num_splits):  # fixed order: the same sum on every run
                acc += tl.load(part_ptr + s * M * N + part_offs, mask=mask, other=0, cache_modifier=".cg")
            if HAS_BIAS:
                acc += tl.load(bias_ptr + offs_n, mask=n_mask, other=0).to(tl.float32)[None, :]
            tl.store(out_ptr + out_offs, acc.to(out_ptr.dtype.element_ty), mask=mask)
            tl.atomic_xchg(counter, 0)  # ready for the next launch (CUDA-graph replays included)
    else:
        if HAS_BIAS:
            acc += tl.load(bias_ptr + offs_n, mask=n_mask, other=0).to(tl.float32)[None, :]
        tl.store(out_ptr + out_offs, acc.to(out_ptr.dtype.element_ty), mask=mask)


@triton.jit
def _quantize_rows_fp8_kernel(x_ptr, q_ptr, scale_ptr, K, stride_xm, stride_qm, BLOCK_K: tl.constexpr):
    """One row per program: amax pass, then x / (amax / 448) clamped and rounded to e4m3 (row read twice, from L2)."""
    row = tl.program_id(0).to(tl.int64)
    amax = tl.zeros((BLOCK_K,), dtype=tl.float32)
    for k0 in range(0, K, BLOCK_K):
        offs = k0 + tl.arange(0, BLOCK_K)
        amax = tl.maximum(amax, tl.abs(tl.load(x_ptr + row * stride_xm + offs, mask=offs < K, other=0).to(tl.float32)))
    row_max = tl.max(amax, axis=0)
    scale = tl.where(row_max > 0, row_max / 448.0, 1.0)
    tl.store(scale_ptr + row, scale)
    for k0 in range(0, K, BLOCK_K):
        offs = k0 + tl.arange(0, BLOCK_K)
        x = tl.load(x_ptr + row * stride_xm + offs, mask=offs < K, other=0).to(tl.float32)
        q = tl.minimum(tl.maximum(x / scale, -448.0), 448.0)  # the e4m3 cast does not saturate
        tl.store(q_ptr + row * stride_qm + offs, q.to(q_ptr.dtype.element_ty), mask=offs < K)
