"""Experiment: int4 tensor-core program with planes along the output rows instead of along K.

quant_kernels' int4 program keeps four weights of one row in a 16-bit lane (four 32-column planes of
a 128-column block): a block is four chained 32-deep dots, each against its own slice of x, so the
dots wait for one another and every plane's x tile is a load of its own (its own wait and CTA barrier).
Here a lane holds the same column of four rows instead ("row planes": in a block of 4 P rows, nibble p
of packed row r is row p P + r), so a K tile is one x tile shared by four independent dots into four
accumulators (the rows of plane p), which Triton issues asynchronously: one x load, one barrier and
four BLOCK_K-deep dots an iteration. Each variant is checked against the reference and timed from
CUDA-graph replays (gpu_time) beside cuBLAS bf16 and the tile table's launch (`table_us`).

    python benchmarks/int4_row_planes.py --output int4_row_planes.json
"""

from __future__ import annotations

import itertools
import sys
from pathlib import Path

import torch
import triton
import triton.language as tl

sys.path.insert(0, str(Path(__file__).resolve().parent))

from model_optimizer.runtime.kernels.quant_dequant import int4_plane  # noqa: E402


def pack_row_planes(q: torch.Tensor, rows: int) -> torch.Tensor:
    """(N, K) codes 0..15 -> (N // 4, K) int16: in each block of 4 `rows` rows, nibble p of packed row r
    is row p * rows + r."""
    n, k = q.shape
    blocks = q.to(torch.int32).reshape(n // (4 * rows), 4, rows, k) & 0xF  # [block, plane, r, k]
    lanes = sum(blocks[:, p] << (4 * p) for p in range(4))  # [block, r, k]
    lanes = (lanes - (lanes >= 2**15).to(torch.int32) * 2**16).to(torch.int16)
    return lanes.reshape(n // 4, k)


@triton.jit
def _plane_group(zeros_ptr, scales_ptr, offs_r, p, P: tl.constexpr, kc, stride_zn, stride_sn, GROUP: tl.constexpr):
    rows = (offs_r // P) * (4 * P) + p * P + offs_r % P  # output rows of plane p (offs_r: packed rows)
    rows64 = rows.to(tl.int64)
    zero = tl.load(zeros_ptr + rows64 * stride_zn + kc // GROUP)
    scale = tl.load(scales_ptr + rows64 * stride_sn + kc // GROUP)
    return zero, scale


@triton.jit
def _row_planes_kernel(x_ptr, w_ptr, scales_ptr, zeros_ptr, out_ptr, M, N, K, stride_xm, stride_wn, stride_sn,
                       stride_zn, stride_om, GROUP: tl.constexpr, P: tl.constexpr, BLOCK_M: tl.constexpr,
                       BLOCK_K: tl.constexpr, USE_ASM: tl.constexpr, DOT: tl.constexpr):  # fmt: skip
    """out.T tile: P packed rows (4 P output rows) x BLOCK_M tokens; BLOCK_K <= GROUP."""
    X_DTYPE: tl.constexpr = x_ptr.dtype.element_ty
    pid = tl.program_id(0)
    num_m = tl.cdiv(M, BLOCK_M)
    pid_m = pid % num_m
    pid_r = pid // num_m
    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_r = pid_r * P + tl.arange(0, P)
    m_mask = offs_m < M
    offs_k = tl.arange(0, BLOCK_K)
    acc0 = tl.zeros((P, BLOCK_M), dtype=tl.float32)
    acc1 = tl.zeros((P, BLOCK_M), dtype=tl.float32)
    acc2 = tl.zeros((P, BLOCK_M), dtype=tl.float32)
    acc3 = tl.zeros((P, BLOCK_M), dtype=tl.float32)
    w_rows = w_ptr + offs_r.to(tl.int64)[:, None] * stride_wn
    for k0 in range(0, K, BLOCK_K):
        k0 = tl.multiple_of(k0, BLOCK_K)
        lanes = tl.load(w_rows + (k0 + offs_k)[None, :])  # (P, BLOCK_K) int16
        x = tl.load(x_ptr + offs_m.to(tl.int64)[None, :] * stride_xm + (k0 + offs_k)[:, None], mask=m_mask[None, :],
                    other=0.0).to(DOT)  # fmt: skip
        z, s = _plane_group(zeros_ptr, scales_ptr, offs_r, 0, P, k0, stride_zn, stride_sn, GROUP)
        acc0 = tl.dot(int4_plane(lanes, z, s, 0, X_DTYPE, DOT, USE_ASM), x, acc0)
        z, s = _plane_group(zeros_ptr, scales_ptr, offs_r, 1, P, k0, stride_zn, stride_sn, GROUP)
        acc1 = tl.dot(int4_plane(lanes, z, s, 1, X_DTYPE, DOT, USE_ASM), x, acc1)
        z, s = _plane_group(zeros_ptr, scales_ptr, offs_r, 2, P, k0, stride_zn, stride_sn, GROUP)
        acc2 = tl.dot(int4_plane(lanes, z, s, 2, X_DTYPE, DOT, USE_ASM), x, acc2)
        z, s = _plane_group(zeros_ptr, scales_ptr, offs_r, 3, P, k0, stride_zn, stride_sn, GROUP)
        acc3 = tl.dot(int4_plane(lanes, z, s, 3, X_DTYPE, DOT, USE_ASM), x, acc3)
    dtype = out_ptr.dtype.element_ty
    base = (offs_r // P) * (4 * P) + offs_r % P
    cols = offs_m.to(tl.int64)[None, :] * stride_om
    tl.store(out_ptr + cols + base[:, None], acc0.to(dtype), mask=m_mask[None, :])
    tl.store(out_ptr + cols + (base + P)[:, None], acc1.to(dtype), mask=m_mask[None, :])
    tl.store(out_ptr + cols + (base + 2 * P)[:, None], acc2.to(dtype), mask=m_mask[None, :])
    tl.store(out_ptr + cols + (base + 3 * P)[:, None], acc3.to(dtype), mask=m_mask[None, :])


def row_planes(x, lanes, scales, zeros, group, rows, block_m, block_k, warps, stages):
    from model_optimizer.runtime.kernels.quant_matmul import _dot_dtype, _use_asm

    m, k = x.shape
    n = lanes.shape[0] * 4
    out = torch.empty(m, n, dtype=x.dtype, device=x.device)
    grid = (triton.cdiv(m, block_m) * (lanes.shape[0] // rows),)
    _row_planes_kernel[grid](x, lanes, scales, zeros, out, m, n, k, x.stride(0), lanes.stride(0), scales.stride(0),
                             zeros.stride(0), out.stride(0), GROUP=group, P=rows, BLOCK_M=block_m, BLOCK_K=block_k,
                             USE_ASM=_use_asm(x), DOT=_dot_dtype(x.dtype), num_warps=warps,
                             num_stages=stages)  # fmt: skip
    return out


CANDIDATES = list(itertools.product((64, 128), (16, 32, 64, 128), (64, 128), (4, 8), (3, 4)))
"""(rows a plane P, block_m, block_k, num_warps, num_stages)."""


def _row(shape: str, m: int, sets: list, dense: list, group: int = 128) -> dict:
    """cuBLAS bf16, the tile table's launch and every row-planes candidate at m rows (GPU us)."""
    from gpu_time import gpu_time_ms
    from int4_mma_variants import baseline

    x, ref, row = baseline(shape, m, sets, dense, group)
    row["variants"] = {}
    for p, bm, bk, warps, stages in CANDIDATES:
        if bm > max(16, m) or bm < min(m, 64) // 4:
            continue
        name = f"P{p} {bm}x{bk} w{warps} s{stages}"

        def call(s, p=p, bm=bm, bk=bk, warps=warps, stages=stages):
            return row_planes(x, s[3][p], s[1], s[2], group, p, bm, bk, warps, stages)

        try:
            out = call(sets[0])
            err = ((out.float() - ref).abs().max() / ref.abs().max()).item()
            if err > 2e-2:
                print(f"{shape} m{m} {name}: wrong ({err:.3g})", flush=True)
                continue
            row["variants"][name] = round(1000 * gpu_time_ms(call, sets, stream_fallback=False), 2)
        except Exception as exc:  # out of shared memory / registers
            print(f"{shape} m{m} {name}: {type(exc).__name__}", flush=True)
    best = min(row["variants"].items(), key=lambda kv: kv[1], default=(None, None))
    row["best"] = {"tiles": best[0], "us": best[1]}
    return row


def main() -> None:
    from int4_mma_variants import shape_arguments, sweep_shapes

    args = shape_arguments(__doc__.splitlines()[0], [16, 64, 128, 256]).parse_args()
    sweep_shapes(
        args.shapes,
        args.rows,
        _row,
        args.output,
        shown=("shape", "m", "bf16_us", "table_us", "best"),
        packings=lambda q: ({p: pack_row_planes(q, p) for p in (64, 128)},),
    )


if __name__ == "__main__":
    main()
