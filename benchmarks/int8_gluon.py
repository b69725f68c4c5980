"""Experiment: int8 weight-only (W8A16) on Hopper's tensor cores in Gluon, against cuBLAS bf16 and ours.

The kernel here is int4_gluon's pipeline (model_optimizer/runtime/kernels/int4_gluon.py) over int8 bytes:
weights and x come into a ring of STAGES shared-memory stages by cp.async, 128 columns a block in four
32-column pieces; each weight piece is widened to bf16 in registers (byte ^ 0x80 into the float
2**23 + u, less 2**23 + 128: exact, as quant_dequant does it) and its warp-group MMA issued
asynchronously, waited for only after the next piece is widened (int4_gluon.in_flight), so a warp
group's CUDA cores widen while its tensor cores multiply; Triton's program (quant_kernels) waits for
each dot before it widens the next tile. The per-channel scale multiplies the float32 product before
split-K's partials are stored; split-K as int4_gluon's (in-order sum by the last split, one launch).

For each of Llama-3.1-8B's linears (or --shapes) at each row count: cuBLAS bf16, the launch the tile table
gives int8 (`table_us`: our Triton program, or the weight widened whole and a dense matmul), and every
launch shape of `quant_tiles.gluon_candidates` (`default`: the one `gluon_default` picks), each checked
against the dequantizing reference (relative error <= 2e-2), then timed from CUDA-graph replays over
weight sets that together exceed the L2. GPU only (Gluon has no interpreter), sm_90:

    python benchmarks/int8_gluon.py --output int8_gluon.json [--rows 64 256] [--shapes 28672:4096]

It is not in the package: on an H100 it beat the table's launches by 7-11% of a layer's linears at 128
and 256 rows, tied at 64 and lost on gate_up, and stayed far from bf16 (README, "Quantized linear
kernels": the W8A16 int8 rows).
"""

from __future__ import annotations

import sys
from pathlib import Path

import torch
from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.ampere import async_copy as cp
from triton.experimental.gluon.language.nvidia.hopper import (
    fence_async_shared,
    warpgroup_mma,
    warpgroup_mma_init,
    warpgroup_mma_wait,
)

sys.path.insert(0, str(Path(__file__).resolve().parent))

from gpu_time import gpu_time_ms, sets_for  # noqa: E402
from int4_gluon import time_launches  # noqa: E402
from int4_mma_variants import shape_arguments  # noqa: E402

from model_optimizer.runtime.kernels.int4_gluon import (  # noqa: E402
    GROUP,
    _async_load,
    _barrier,
    in_flight,
    split_plan,
    store_tile,
)
from model_optimizer.runtime.kernels.quant_linear import w8a16_linear  # noqa: E402
from model_optimizer.runtime.kernels.quant_reference import w8a16_linear_ref  # noqa: E402
from model_optimizer.runtime.kernels.quant_tiles import QuantTiles  # noqa: E402


@gluon.jit
def _widen(w):
    """Two int8 codes (the low half of each 32-bit operand) -> two bf16 values, exactly."""
    asm: gl.constexpr = (
        "{ .reg .b32 a, f0, f1; xor.b32 a, $1, 0x8080; "
        "prmt.b32 f0, a, 0x4B000000, 0x7540; prmt.b32 f1, a, 0x4B000000, 0x7541; "
        "sub.f32 f0, f0, 0f4B000080; sub.f32 f1, f1, 0f4B000080; cvt.rn.bf16x2.f32 $0, f1, f0; }"
    )
    return gl.inline_asm_elementwise(asm, "=r,r", [w], dtype=gl.bfloat16, is_pure=True, pack=2)


@gluon.jit
def _issue(x_ptr, w_ptr, w_smem, x_smem, first, i, n_blocks, offs_wn, offs_wc, offs_xm, offs_xc, M, stride_xm,
           STAGES: gl.constexpr):  # fmt: skip
    """cp.async of the split's block i (K block first + i: the program's weight rows and x, four 32-column
    pieces each) into its stage; nothing read past the split's last block, one commit group either way."""
    s = i % STAGES
    live = i < n_blocks
    b = first + i
    for p in gl.static_range(4):
        w_ptrs = w_ptr + offs_wn + (b * 128 + 32 * p + offs_wc)
        w_mask = gl.broadcast((offs_wc < 32) & live, w_ptrs)[0]
        _async_load(w_smem.index(s * 4 + p), w_ptrs, mask=w_mask)
    for p in gl.static_range(4):  # x's four 32-column pieces, as int4_gluon._issue loads them
        x_ptrs = x_ptr + offs_xm * stride_xm + (b * 128 + 32 * p + offs_xc)
        _async_load(x_smem.index(s * 4 + p), x_ptrs, mask=gl.broadcast((offs_xm < M) & live, x_ptrs)[0])
    cp.commit_group()


@gluon.jit(do_not_specialize=["M"])  # one compile serves every row count
def int8_mma_kernel(
    x_ptr,
    w_ptr,
    scales_ptr,
    out_ptr,
    part_ptr,
    count_ptr,
    M,
    N,
    K,
    stride_xm,
    stride_wn,
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
    """out (M, N) = (x (M, K) @ W.T) * scales; W int8 (N, K), scales (N,). A program: BLOCK_N weight rows
    (the MMA's M, 64 per warp group) by BLOCK_M tokens over its split of K (`blocks_per_split` 128-column
    blocks; program_id(1) the split); split-K partials and their in-order sum as int4_mma_kernel's."""
    pid = gl.program_id(0)
    pid_k = gl.program_id(1)
    num_m = gl.cdiv(M, BLOCK_M)
    pid_m = pid % num_m
    pid_n = pid // num_m
    first = pid_k * blocks_per_split
    n_blocks = gl.minimum(blocks_per_split, K // 128 - first)
    gl.assume(n_blocks > 0)

    mma: gl.constexpr = gl.NVMMADistributedLayout(
        version=[3, 0], warps_per_cta=[num_warps, 1], instr_shape=[16, BLOCK_M, 16]
    )
    a_layout: gl.constexpr = gl.DotOperandLayout(operand_index=0, parent=mma, k_width=2)
    w_load: gl.constexpr = gl.BlockedLayout([1, 16], [16, 2], [num_warps, 1], [1, 0])  # 16 bytes a thread
    x_load: gl.constexpr = gl.BlockedLayout([1, 8], [8, 4], [num_warps, 1], [1, 0])
    w_shared: gl.constexpr = gl.NVMMASharedLayout.get_default_for([BLOCK_N, 32], gl.int8)
    x_shared: gl.constexpr = gl.NVMMASharedLayout.get_default_for([BLOCK_M, 32], gl.bfloat16)
    w_smem = gl.allocate_shared_memory(gl.int8, [STAGES * 4, BLOCK_N, 32], w_shared)
    x_smem = gl.allocate_shared_memory(gl.bfloat16, [STAGES * 4, BLOCK_M, 32], x_shared)

    offs_wn = (pid_n * BLOCK_N + gl.arange(0, BLOCK_N, layout=gl.SliceLayout(1, w_load)))[:, None].to(
        gl.int64
    ) * stride_wn
    offs_wc = gl.arange(0, 32, layout=gl.SliceLayout(0, w_load))[None, :]
    offs_xm = (pid_m * BLOCK_M + gl.arange(0, BLOCK_M, layout=gl.SliceLayout(1, x_load)))[:, None]
    offs_xc = gl.arange(0, 32, layout=gl.SliceLayout(0, x_load))[None, :]

    for i in gl.static_range(STAGES - 1):
        _issue(x_ptr, w_ptr, w_smem, x_smem, first, i, n_blocks, offs_wn, offs_wc, offs_xm, offs_xc, M, stride_xm,
               STAGES)  # fmt: skip

    acc = warpgroup_mma_init(gl.zeros([BLOCK_N, BLOCK_M], gl.float32, layout=mma))
    gl.static_assert((IN_FLIGHT >= 1) and (IN_FLIGHT <= 4), "the refill goes after piece IN_FLIGHT - 1 of four")
    for b in range(n_blocks):
        s = b % STAGES
        cp.wait_group(STAGES - 2)  # block b's copies have landed (this thread's)
        fence_async_shared()
        _barrier()  # and every thread's
        for p in gl.static_range(4):
            codes = w_smem.index(s * 4 + p).load(a_layout)
            w = _widen(codes)
            if p == 0:  # the accumulator's first MMA zeroes it
                acc = warpgroup_mma(w, x_smem.index(s * 4 + p).permute((1, 0)), acc, use_acc=b > 0, is_async=True)
            else:
                acc = warpgroup_mma(w, x_smem.index(s * 4 + p).permute((1, 0)), acc, is_async=True)
            warpgroup_mma_wait(num_outstanding=IN_FLIGHT, deps=(w,))
            if p == IN_FLIGHT - 1:  # block b - 1's last MMAs are done: its stage takes block b + STAGES - 1
                _barrier()
                _issue(x_ptr, w_ptr, w_smem, x_smem, first, b + STAGES - 1, n_blocks, offs_wn, offs_wc, offs_xm,
                       offs_xc, M, stride_xm, STAGES)  # fmt: skip
    acc = warpgroup_mma_wait(num_outstanding=0, deps=(acc,))
    cp.wait_group(0)

    offs_on = pid_n * BLOCK_N + gl.arange(0, BLOCK_N, layout=gl.SliceLayout(1, mma))
    offs_om = pid_m * BLOCK_M + gl.arange(0, BLOCK_M, layout=gl.SliceLayout(0, mma))
    acc = acc * gl.load(scales_ptr + offs_on, mask=offs_on < N, other=0.0).to(gl.float32)[:, None]
    store_tile(acc, offs_on, offs_om, pid_n * BLOCK_N, pid_m * BLOCK_M, out_ptr, part_ptr, count_ptr, pid, pid_k, M, N,
               stride_om, num_splits, BLOCK_N, BLOCK_M, SPLIT, num_warps)  # fmt: skip


def int8_gluon_matmul(
    x: torch.Tensor,
    qweight: torch.Tensor,
    scales: torch.Tensor,
    block_n: int,
    block_m: int,
    num_warps: int,
    stages: int,
    splits: int = 1,
    bias: torch.Tensor | None = None,
) -> torch.Tensor:
    """x (M, K) bf16 @ (qweight int8 (N, K) * scales (N,)).T (+ bias) -> (M, N) bf16, over `splits` slices
    of K (one inside a CUDA-graph capture that finds too few counters, kernels/counters.py)."""
    m, k = x.shape
    n = qweight.shape[0]
    if n % block_n or k % GROUP or k == 0:
        raise ValueError(f"N must be a multiple of {block_n} and K a positive multiple of {GROUP}, got {n} x {k}")
    if x.dtype != torch.bfloat16 or qweight.dtype != torch.int8 or scales.numel() != n:
        raise ValueError("x must be bf16, the weight int8 and the scales one per output channel")
    x = x if x.stride(-1) == 1 else x.contiguous()
    qweight, scales = qweight.contiguous(), scales.contiguous()
    out = torch.empty(m, n, dtype=torch.bfloat16, device=x.device)
    if m == 0:
        return out
    tiles, splits, per_split, part, counters = split_plan(out, k, block_m, block_n, splits)
    int8_mma_kernel[(tiles, splits)](x, qweight, scales, out, part, counters, m, n, k,
                                     x.stride(0), qweight.stride(0), out.stride(0), per_split, splits,
                                     BLOCK_N=block_n, BLOCK_M=block_m, STAGES=stages, SPLIT=splits > 1,
                                     IN_FLIGHT=in_flight(block_m, block_n), num_warps=num_warps)  # fmt: skip
    return out if bias is None else out.add_(bias)


def _row(shape: str, m: int, sets: list, dense: list) -> dict:
    """cuBLAS bf16, the table's int8 launch and every Gluon launch shape at m rows (GPU us)."""
    x = torch.randn(m, int(shape.split(":")[1]), device="cuda", dtype=torch.bfloat16)
    row = {
        "shape": shape,
        "m": m,
        "bf16_us": round(1000 * gpu_time_ms(lambda w: torch.nn.functional.linear(x, w), dense), 2),
        "table_us": round(1000 * gpu_time_ms(lambda s: w8a16_linear(x, s[0], s[1]), sets), 2),
    }

    def launch(s, t: QuantTiles):  # noqa: ANN001, ANN202
        return int8_gluon_matmul(x, s[0], s[1], t.block_n, t.block_m, t.num_warps, t.num_stages, t.split_k)

    ref = w8a16_linear_ref(x, *sets[0]).float()
    return time_launches(row, launch, ref, sets, m, int(shape.split(":")[0]), x.shape[1])


def main() -> None:
    import json

    from model_optimizer.common.fileio import atomic_write

    args = shape_arguments(__doc__.splitlines()[0], [32, 64, 128, 256]).parse_args()
    torch.manual_seed(0)
    results = []
    for shape in args.shapes:
        n, k = map(int, shape.split(":"))
        sets = [
            (
                torch.randint(-127, 128, (n, k), dtype=torch.int8, device="cuda"),
                torch.rand(n, device="cuda") * 0.01 + 1e-4,
            )
            for _ in range(sets_for(n * k))
        ]
        dense = [torch.randn(n, k, device="cuda", dtype=torch.bfloat16) for _ in range(sets_for(n * k * 2))]
        for m in args.rows:
            row = _row(shape, m, sets, dense)
            shown = ("shape", "m", "bf16_us", "table_us", "best", "default", "errors")
            print(json.dumps({key: row[key] for key in shown}), flush=True)
            results.append(row)
            atomic_write(args.output, json.dumps({"benchmark": "int8_gluon", "rows": results}, indent=1))
        del sets, dense
        torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
