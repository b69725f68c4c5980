"""int4 (W4A16, group 128, planes packing) on Hopper's tensor cores, written in Gluon.

Triton's own int4 program (quant_kernels) waits for every plane's warp-group MMAs before it widens the
next plane (`WARPGROUP.DEPBAR.LE gsb0, 0x0` after each in its sm_90 SASS), so a warp group's CUDA cores
and tensor cores take turns. Gluon leaves those waits to the kernel: here each plane's MMAs are issued
asynchronously and waited for only after the next plane is widened (`warpgroup_mma_wait(1)`; after the
next two for tiles of 128 tokens and more, `in_flight`), and
weights and activations come into a ring of STAGES shared-memory stages by cp.async. A program owns
BLOCK_N weight rows (the MMA's M side, 64 per warp group) by BLOCK_M tokens over a split of K; split-K
as quant_kernels does it (float32 partials, the last split of a tile adds them in order and resets the
tile's counter), deterministic and in one launch, so a CUDA graph can capture it.

Where it runs: sm_90 (wgmma), bf16 activations, groups of 128 columns, N a multiple of BLOCK_N, and a
CUDA tensor (or the meta tensors of an ahead-of-time build for sm_90); `fits` says so and `_gpu_matmul`
(quant_linear) takes Triton's program elsewhere. The tile table (quant_tiles) names it as backend
"gluon" per shape where the sweep measured it faster (README, "Quantized linear kernels"). Gluon has
no interpreter: tests/gpu/test_quant_kernels_gpu.py checks it against the dequantizing reference on
the H200; the CPU tests check where it is chosen, and compile it for sm_90 (its SASS, and the dispatch
walked on meta tensors: tests/runtime/kernels/int4_gluon_compile_sm90.py).
"""

from __future__ import annotations

import functools
import os

import torch
import triton
from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.ampere import async_copy as cp
from triton.experimental.gluon.language.nvidia.hopper import (
    fence_async_shared,
    warpgroup_mma,
    warpgroup_mma_init,
    warpgroup_mma_wait,
)

from model_optimizer.runtime.kernels import aot
from model_optimizer.runtime.kernels.counters import Counters

GROUP = 128
"""Columns per scale and zero point: the kernel loads one of each per 128-column block."""
# Triton 3.9 renamed two of the calls: its async_load (3.6's async_copy_global_to_shared, which 3.9 keeps
# only to raise) and its barrier (3.6's thread_barrier, gone in 3.9)
_async_load = getattr(cp, "async_load", None) or cp.async_copy_global_to_shared
_barrier = getattr(gl, "thread_barrier", None) or gl.barrier
COUNTERS = Counters(4096)
"""Split-K's per-tile counters (Llama's gate_up at 64 weight rows and 4 token tiles: 1,792)."""


@gluon.jit
def _widen(lanes, offset_zero, scale, P: gl.constexpr):
    """bf16 (q - zero) * scale of nibble P of each 16-bit lane, two lanes an instruction block."""
    if P == 0:
        asm: gl.constexpr = "{ .reg .b32 t; lop3.b32 t, $1, 0x000F000F, 0x43004300, 0xEA; sub.rn.bf16x2 t, t, $2; mul.rn.bf16x2 $0, t, $3; }"
    elif P == 1:
        asm: gl.constexpr = "{ .reg .b32 t; shr.b32 t, $1, 4; lop3.b32 t, t, 0x000F000F, 0x43004300, 0xEA; sub.rn.bf16x2 t, t, $2; mul.rn.bf16x2 $0, t, $3; }"
    elif P == 2:
        asm: gl.constexpr = "{ .reg .b32 t; shr.b32 t, $1, 8; lop3.b32 t, t, 0x000F000F, 0x43004300, 0xEA; sub.rn.bf16x2 t, t, $2; mul.rn.bf16x2 $0, t, $3; }"
    else:
        asm: gl.constexpr = "{ .reg .b32 t; shr.b32 t, $1, 12; lop3.b32 t, t, 0x000F000F, 0x43004300, 0xEA; sub.rn.bf16x2 t, t, $2; mul.rn.bf16x2 $0, t, $3; }"
    return gl.inline_asm_elementwise(
        asm, "=r,r,r,r", [lanes, offset_zero, scale], dtype=gl.bfloat16, is_pure=True, pack=2
    )


@gluon.jit
def _issue(
    x_ptr,
    w_ptr,
    lanes_smem,
    x_smem,
    first,
    i,
    n_blocks,
    offs_wn,
    offs_wl,
    offs_xm,
    offs_xc,
    M,
    stride_xm,
    STAGES: gl.constexpr,
):
    """cp.async of the split's block i (K block first + i: lanes of the program's rows, and x's four
    32-column planes) into its stage; nothing read past the split's last block, one commit group either
    way."""
    s = i % STAGES
    live = i < n_blocks
    b = first + i
    w_ptrs = w_ptr + offs_wn + (b * 32 + offs_wl)
    w_mask = gl.broadcast((offs_wl < 32) & live, w_ptrs)[0]  # the pointers' full shape
    _async_load(lanes_smem.index(s), w_ptrs, mask=w_mask)
    for p in gl.static_range(4):
        x_ptrs = x_ptr + offs_xm * stride_xm + (b * 128 + 32 * p + offs_xc)
        x_mask = gl.broadcast((offs_xm < M) & live, x_ptrs)[0]
        _async_load(x_smem.index(s * 4 + p), x_ptrs, mask=x_mask)
    cp.commit_group()


@gluon.jit
def _sum_splits(part_ptr, out_ptr, M, N, stride_om, n0, m0, num_splits, BLOCK_N: gl.constexpr,
                BLOCK_M: gl.constexpr, num_warps: gl.constexpr):  # fmt: skip
    """out[m0:, n0:] of one tile = the sum of its float32 partials (part_ptr: (num_splits, M, N)) in split
    order, in a layout of its own: four contiguous weight rows a thread (one 16-byte load each), up to 64
    values a thread at a time (the whole of a 128 x 128 tile on 8 warps, half of the widest): a chunk's
    partial of one split is one load, so a chunk waits for memory once a split (in chunks of 32 tokens: once
    a split and chunk). The whole tile in the MMA's layout held a 64-bit address per value and spilled the
    128-token tiles' registers."""
    layout: gl.constexpr = gl.BlockedLayout([4, 1], [16, 2], [1, num_warps], [0, 1])
    SUM_M: gl.constexpr = min(BLOCK_M, 64 * 32 * num_warps // BLOCK_N)
    CHUNKS: gl.constexpr = BLOCK_M // SUM_M
    offs_n = n0 + gl.arange(0, BLOCK_N, layout=gl.SliceLayout(1, layout))
    for c in gl.static_range(CHUNKS):
        offs_m = m0 + c * SUM_M + gl.arange(0, SUM_M, layout=gl.SliceLayout(0, layout))
        mask = (offs_m[None, :] < M) & (offs_n[:, None] < N)
        offs = offs_m[None, :].to(gl.int64) * N + offs_n[:, None]
        total = gl.zeros([BLOCK_N, SUM_M], gl.float32, layout=layout)
        for k in range(num_splits):
            total += gl.load(part_ptr + k * M * N + offs, mask=mask, other=0.0, cache_modifier=".cg")
        out_ptrs = out_ptr + offs_m[None, :].to(gl.int64) * stride_om + offs_n[:, None]
        gl.store(out_ptrs, total.to(gl.bfloat16), mask=mask)


@gluon.jit(do_not_specialize=["M"])  # one compile serves every row count: mixed steps bring odd ones
def int4_mma_kernel(
    x_ptr,
    w_ptr,
    scales_ptr,
    zeros_ptr,
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
    blocks_per_split,
    num_splits,
    BLOCK_N: gl.constexpr,
    BLOCK_M: gl.constexpr,
    STAGES: gl.constexpr,
    SPLIT: gl.constexpr,
    IN_FLIGHT: gl.constexpr,
    num_warps: gl.constexpr,
):
    """out (M, N) = x (M, K) @ W.T; W int16 lanes (N, K / 4), scales bf16 and zeros uint8 (N, K / 128).
    A program: BLOCK_N weight rows (the MMA's M, 64 per warp group) by BLOCK_M tokens, over its split
    of K (`blocks_per_split` 128-column blocks; program_id(1) the split). With several splits each
    stores its float32 partial (part_ptr: (num_splits, M, N)) and the last of a tile to finish
    (count_ptr: a zeroed int32 per tile, reset after) adds them in split order and writes out, as
    quant_kernels does: deterministic, one launch."""
    pid = gl.program_id(0)
    pid_k = gl.program_id(1)
    num_m = gl.cdiv(M, BLOCK_M)
    pid_m = pid % num_m
    pid_n = pid // num_m
    first = pid_k * blocks_per_split
    n_blocks = gl.minimum(blocks_per_split, K // 128 - first)
    gl.assume(n_blocks > 0)  # the launcher makes no empty split; and no path around the loop that
    # would define the accumulator by moves

    mma: gl.constexpr = gl.NVMMADistributedLayout(
        version=[3, 0], warps_per_cta=[num_warps, 1], instr_shape=[16, BLOCK_M, 16]
    )
    a_layout: gl.constexpr = gl.DotOperandLayout(operand_index=0, parent=mma, k_width=2)
    row_layout: gl.constexpr = gl.SliceLayout(1, a_layout)
    load_layout: gl.constexpr = gl.BlockedLayout([1, 8], [8, 4], [num_warps, 1], [1, 0])
    lanes_shared: gl.constexpr = gl.NVMMASharedLayout.get_default_for([BLOCK_N, 32], gl.int16)
    x_shared: gl.constexpr = gl.NVMMASharedLayout.get_default_for([BLOCK_M, 32], gl.bfloat16)
    lanes_smem = gl.allocate_shared_memory(gl.int16, [STAGES, BLOCK_N, 32], lanes_shared)
    x_smem = gl.allocate_shared_memory(gl.bfloat16, [STAGES * 4, BLOCK_M, 32], x_shared)

    offs_wn = (pid_n * BLOCK_N + gl.arange(0, BLOCK_N, layout=gl.SliceLayout(1, load_layout)))[:, None].to(
        gl.int64
    ) * stride_wn
    offs_wl = gl.arange(0, 32, layout=gl.SliceLayout(0, load_layout))[None, :]
    offs_xm = (pid_m * BLOCK_M + gl.arange(0, BLOCK_M, layout=gl.SliceLayout(1, load_layout)))[:, None]
    offs_xc = gl.arange(0, 32, layout=gl.SliceLayout(0, load_layout))[None, :]

    for i in gl.static_range(STAGES - 1):
        _issue(x_ptr, w_ptr, lanes_smem, x_smem, first, i, n_blocks, offs_wn, offs_wl, offs_xm, offs_xc, M,
               stride_xm, STAGES)  # fmt: skip

    rows = pid_n * BLOCK_N + gl.arange(0, BLOCK_N, layout=row_layout)
    zero_ptrs = zeros_ptr + rows.to(gl.int64) * stride_zn
    scale_ptrs = scales_ptr + rows.to(gl.int64) * stride_sn
    zero_ptrs += first
    scale_ptrs += first
    next_zero = gl.load(
        zero_ptrs
    )  # the split's first block's; each block loads the next one's (a load's latency off the MMAs' path)
    next_scale = gl.load(scale_ptrs)
    acc = warpgroup_mma_init(gl.zeros([BLOCK_N, BLOCK_M], gl.float32, layout=mma))
    gl.static_assert((IN_FLIGHT >= 1) and (IN_FLIGHT <= 4), "the refill goes after plane IN_FLIGHT - 1 of four")
    for b in range(n_blocks):
        s = b % STAGES
        cp.wait_group(STAGES - 2)  # block b's copies have landed (this thread's)
        fence_async_shared()  # this thread's writes ordered before the MMAs' async-proxy reads
        _barrier()  # and every thread's
        lanes = lanes_smem.index(s).load(a_layout)
        zero, scale = next_zero, next_scale
        ahead = gl.broadcast(rows * 0 + b + 1 < n_blocks, rows)[0]
        next_zero = gl.load(zero_ptrs + b + 1, mask=ahead, other=0)
        next_scale = gl.load(scale_ptrs + b + 1, mask=ahead, other=0.0)
        offset_zero = (zero.to(gl.int16) | 0x4300).to(gl.bfloat16, bitcast=True)  # 128 + zero, exact
        offset_zero = gl.broadcast(offset_zero[:, None], lanes)[0]
        scale = gl.broadcast(scale[:, None], lanes)[0]
        for p in gl.static_range(4):
            w = _widen(lanes, offset_zero, scale, p)
            if p == 0:  # the accumulator's first MMA zeroes it: no other instruction may define it
                acc = warpgroup_mma(w, x_smem.index(s * 4 + p).permute((1, 0)), acc, use_acc=b > 0, is_async=True)
            else:
                acc = warpgroup_mma(w, x_smem.index(s * 4 + p).permute((1, 0)), acc, is_async=True)
            # all but the last IN_FLIGHT planes' MMAs done; deps not on acc, which only MMAs read until the
            # end (a wait that named it would define its registers while an MMA writes them: ptxas would
            # serialize). The in-flight planes' operand registers are ptxas's to keep: in the sm_90 SASS of
            # every variant nothing writes them before the DEPBAR that retires their MMAs
            warpgroup_mma_wait(num_outstanding=IN_FLIGHT, deps=(lanes,))
            if p == IN_FLIGHT - 1:  # block b - 1's last MMAs are done: its stage takes block b + STAGES - 1
                _barrier()  # in every warp group (with 8 warps, two read the same x stage)
                _issue(x_ptr, w_ptr, lanes_smem, x_smem, first, b + STAGES - 1, n_blocks, offs_wn, offs_wl,
                       offs_xm, offs_xc, M, stride_xm, STAGES)  # fmt: skip
    acc = warpgroup_mma_wait(num_outstanding=0, deps=(acc,))
    cp.wait_group(0)

    offs_on = pid_n * BLOCK_N + gl.arange(0, BLOCK_N, layout=gl.SliceLayout(1, mma))
    offs_om = pid_m * BLOCK_M + gl.arange(0, BLOCK_M, layout=gl.SliceLayout(0, mma))
    store_tile(acc, offs_on, offs_om, pid_n * BLOCK_N, pid_m * BLOCK_M, out_ptr, part_ptr, count_ptr, pid, pid_k, M, N,
               stride_om, num_splits, BLOCK_N, BLOCK_M, SPLIT, num_warps)  # fmt: skip


@gluon.jit
def store_tile(acc, offs_on, offs_om, n0, m0, out_ptr, part_ptr, count_ptr, pid, pid_k, M, N, stride_om, num_splits,
               BLOCK_N: gl.constexpr, BLOCK_M: gl.constexpr, SPLIT: gl.constexpr, num_warps: gl.constexpr):  # fmt: skip
    """A program's float32 tile (weight rows offs_on from n0 by tokens offs_om from m0) into out (M, N) as bf16; with SPLIT,
    its split's partial, and the last split of the tile to report (count_ptr + pid) adds the partials in
    split order, writes out and resets the counter."""
    out_ptrs = out_ptr + offs_om[None, :].to(gl.int64) * stride_om + offs_on[:, None]
    out_mask = (offs_om[None, :] < M) & (offs_on[:, None] < N)
    if SPLIT:  # a compile of its own: the sum would cost the one-split tiles registers
        part_offs = offs_om[None, :].to(gl.int64) * N + offs_on[:, None]
        gl.store(part_ptr + pid_k * M * N + part_offs, acc, mask=out_mask)
        _barrier()  # every thread's partial is stored before this program reports in
        counter = count_ptr + pid
        if gl.atomic_add(counter, 1, sem="acq_rel") == num_splits - 1:  # the last split sums them, in order
            _sum_splits(part_ptr, out_ptr, M, N, stride_om, n0, m0, num_splits, BLOCK_N, BLOCK_M, num_warps)
            gl.atomic_xchg(counter, 0)  # ready for the next launch (graph replays included)
    else:
        gl.store(out_ptrs, acc.to(gl.bfloat16), mask=out_mask)


def fits(x: torch.Tensor, scales: torch.Tensor, group_size: int, block_n: int) -> bool:
    """Whether the kernel can take this call: x and the scales bf16 on an sm_90 GPU (or the meta tensors of
    an ahead-of-time build for sm_90, aot.py), groups of 128, N a multiple of block_n and K of 128; never
    with $MOPT_INT4_GLUON=0 (our Triton program then runs every int4 shape)."""
    if os.environ.get("MOPT_INT4_GLUON", "1") == "0" or not aot.on_gpu(x) or group_size != GROUP:
        return False
    if x.dtype != torch.bfloat16 or scales.dtype != torch.bfloat16:
        return False
    k = x.shape[-1]
    return scales.shape[0] % block_n == 0 and k % GROUP == 0 and k > 0 and _hopper(x.device.index, aot.building())


@functools.lru_cache(maxsize=8)
def _hopper(device_index: int | None, target: aot.AotTarget | None) -> bool:
    """sm_90 (wgmma): the device's, or the ahead-of-time target's (asked once per pair, not per call)."""
    return aot.device_facts(device_index)[2] == (9, 0)


def int4_gluon_matmul(
    x: torch.Tensor,
    lanes: torch.Tensor,
    scales: torch.Tensor,
    zeros: torch.Tensor,
    block_n: int,
    block_m: int,
    num_warps: int,
    stages: int,
    splits: int = 1,
    bias: torch.Tensor | None = None,
) -> torch.Tensor:
    """x (M, K) bf16 @ the int4 weight (lanes: int16 (N, K / 4) in the planes packing; scales bf16 and
    zeros uint8 (N, K / 128)) (+ bias) -> (M, N) bf16, over `splits` slices of K (one inside a CUDA-graph
    capture that finds too few counters, kernels/counters.py)."""
    m, k = x.shape
    n = lanes.shape[0]
    if n % block_n or k % GROUP or k == 0:
        raise ValueError(f"N must be a multiple of {block_n} and K a positive multiple of {GROUP}, got {n} x {k}")
    if x.dtype != torch.bfloat16 or scales.shape[1] != k // GROUP:
        raise ValueError("x must be bf16 and scales (N, K / 128)")
    x = x if x.stride(-1) == 1 else x.contiguous()
    scales, zeros = scales.contiguous(), zeros.contiguous()
    out = torch.empty(m, n, dtype=torch.bfloat16, device=x.device)
    if m == 0:
        return out
    tiles, splits, per_split, part, counters = split_plan(out, k, block_m, block_n, splits)
    int4_mma_kernel[(tiles, splits)](x, lanes, scales, zeros, out, part, counters, m, n, k,
                                     x.stride(0), lanes.stride(0), scales.stride(0), zeros.stride(0), out.stride(0),
                                     per_split, splits, BLOCK_N=block_n, BLOCK_M=block_m, STAGES=stages,
                                     SPLIT=splits > 1, IN_FLIGHT=in_flight(block_m, block_n),
                                     num_warps=num_warps)  # fmt: skip
    return out if bias is None else out.add_(bias)


def split_plan(
    out: torch.Tensor, k: int, block_m: int, block_n: int, splits: int
) -> tuple[int, int, int, torch.Tensor, torch.Tensor]:
    """(output tiles, splits, 128-column blocks per split, the partials' buffer, the split-K counters) of a
    launch writing `out` (M, N) over `splits` slices of K: one split inside a CUDA-graph capture that finds
    too few counters (kernels/counters.py), none empty; with one split the buffers are `out` itself."""
    m, n = out.shape
    blocks = k // GROUP
    tiles = triton.cdiv(m, block_m) * (n // block_n)
    counters = COUNTERS.get(out.device, tiles) if splits > 1 else None
    per_split = triton.cdiv(blocks, splits if counters is not None else 1)
    splits = triton.cdiv(blocks, per_split)  # no empty split
    if splits == 1:
        return tiles, 1, per_split, out, out
    return tiles, splits, per_split, torch.empty(splits, m, n, dtype=torch.float32, device=out.device), counters


def in_flight(block_m: int, block_n: int) -> int:
    """Planes of warp-group MMAs the K loop leaves running while it widens the next: two for token tiles of
    128 and more (up to 128 weight rows), so that the tensor cores keep a plane queued through a block's
    barriers and refill; one elsewhere, where two measured slower (the narrow token tiles) or would spill
    (128 tokens by 256 weight rows). The measurements: README, "Quantized linear kernels"."""
    return 2 if block_m >= 128 and block_n <= 128 else 1
