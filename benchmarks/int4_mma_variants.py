"""Experiment: int4 tensor-core programs in other shapes than quant_kernels' swap-AB 32-deep dots.

Variants of x (M, K) @ dequantize(W).T for M = 32..256 on Llama-3.1-8B's linears, each checked
against the reference and timed from CUDA-graph replays (gpu_time) beside cuBLAS bf16 and the
tile table's launch (`table_us`: quant_kernels' program, the weight the A operand, 32-deep dots):
  swap128  the weight the A operand, its four planes joined into one 128-deep dot
  std32    x the A operand, each dequantized plane transposed into the B operand (shared memory)
  std128   x the A operand, the joined 128-column block transposed into the B operand

    python benchmarks/int4_mma_variants.py --output int4_mma.json
"""

from __future__ import annotations

import argparse
import itertools
import json
import sys
from collections.abc import Callable
from pathlib import Path

import torch
import triton
import triton.language as tl

sys.path.insert(0, str(Path(__file__).resolve().parent))

from gpu_time import gpu_time_ms, sets_for  # noqa: E402

from model_optimizer.runtime.kernels.quant_dequant import int4_plane  # noqa: E402
from model_optimizer.runtime.kernels.quant_matmul import _dot_dtype, _use_asm, quant_matmul  # noqa: E402
from model_optimizer.runtime.kernels.quant_reference import pack_int4_planes, w4a16_linear_ref  # noqa: E402

MODES = {"swap128": 0, "std32": 1, "std128": 2}
GROUP = 128
"""Quantization group of the experiments' weights (columns per scale and zero point)."""


@triton.jit
def _block(w_ptr, scales_ptr, zeros_ptr, offs_n, k0, stride_wn, stride_sn, stride_zn, GROUP: tl.constexpr,
           X_DTYPE: tl.constexpr, USE_ASM: tl.constexpr):  # fmt: skip
    lane = tl.arange(0, 32)
    offs_n64 = offs_n.to(tl.int64)
    lanes = tl.load(w_ptr + offs_n64[:, None] * stride_wn + (k0 // 4 + lane)[None, :])
    zero = tl.load(zeros_ptr + offs_n64 * stride_zn + k0 // GROUP)
    scale = tl.load(scales_ptr + offs_n64 * stride_sn + k0 // GROUP)
    p0 = int4_plane(lanes, zero, scale, 0, X_DTYPE, X_DTYPE, USE_ASM)
    p1 = int4_plane(lanes, zero, scale, 1, X_DTYPE, X_DTYPE, USE_ASM)
    p2 = int4_plane(lanes, zero, scale, 2, X_DTYPE, X_DTYPE, USE_ASM)
    p3 = int4_plane(lanes, zero, scale, 3, X_DTYPE, X_DTYPE, USE_ASM)
    return p0, p1, p2, p3


@triton.jit
def _variant_kernel(x_ptr, w_ptr, scales_ptr, zeros_ptr, out_ptr, M, N, K, stride_xm, stride_wn, stride_sn,
                    stride_zn, stride_om, MODE: tl.constexpr, GROUP: tl.constexpr, BLOCK_M: tl.constexpr,
                    BLOCK_N: tl.constexpr, USE_ASM: tl.constexpr, DOT: tl.constexpr):  # fmt: skip
    X_DTYPE: tl.constexpr = x_ptr.dtype.element_ty
    pid = tl.program_id(0)
    num_m = tl.cdiv(M, BLOCK_M)
    pid_m = pid % num_m
    pid_n = pid // num_m
    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    m_mask = offs_m < M
    x_rows = x_ptr + offs_m.to(tl.int64)[:, None] * stride_xm
    # joined order: f = 4 l + 2 i + j holds plane 2 j + i, lane l -> column 32 (2 j + i) + l
    f = tl.arange(0, 128)
    joined_cols = 32 * (2 * (f % 2) + (f // 2) % 2) + f // 4
    lane = tl.arange(0, 32)
    if MODE == 0:
        acc = tl.zeros((BLOCK_N, BLOCK_M), dtype=tl.float32)
    else:
        acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k0 in range(0, K, 128):
        k0 = tl.multiple_of(k0, 128)
        p0, p1, p2, p3 = _block(w_ptr, scales_ptr, zeros_ptr, offs_n, k0, stride_wn, stride_sn, stride_zn, GROUP,
                                X_DTYPE, USE_ASM)  # fmt: skip
        p0, p1, p2, p3 = p0.to(DOT), p1.to(DOT), p2.to(DOT), p3.to(DOT)  # float32 under the interpreter
        if MODE == 1:
            x0 = tl.load(x_rows + (k0 + lane)[None, :], mask=m_mask[:, None], other=0.0)
            acc = tl.dot(x0.to(DOT), tl.trans(p0), acc)
            x1 = tl.load(x_rows + (k0 + 32 + lane)[None, :], mask=m_mask[:, None], other=0.0)
            acc = tl.dot(x1.to(DOT), tl.trans(p1), acc)
            x2 = tl.load(x_rows + (k0 + 64 + lane)[None, :], mask=m_mask[:, None], other=0.0)
            acc = tl.dot(x2.to(DOT), tl.trans(p2), acc)
            x3 = tl.load(x_rows + (k0 + 96 + lane)[None, :], mask=m_mask[:, None], other=0.0)
            acc = tl.dot(x3.to(DOT), tl.trans(p3), acc)
        else:
            w = tl.reshape(tl.join(tl.join(p0, p1), tl.join(p2, p3)), (BLOCK_N, 128))
            x = tl.load(x_rows + (k0 + joined_cols)[None, :], mask=m_mask[:, None], other=0.0).to(DOT)  # (BLOCK_M, 128)
            if MODE == 0:
                acc = tl.dot(w, tl.trans(x), acc)
            else:
                acc = tl.dot(x, tl.trans(w), acc)
    dtype = out_ptr.dtype.element_ty
    if MODE == 0:
        tl.store(out_ptr + offs_m.to(tl.int64)[None, :] * stride_om + offs_n[:, None], acc.to(dtype),
                 mask=m_mask[None, :])  # fmt: skip
    else:
        tl.store(out_ptr + offs_m.to(tl.int64)[:, None] * stride_om + offs_n[None, :], acc.to(dtype),
                 mask=m_mask[:, None])  # fmt: skip


def variant(x, planes16, scales, zeros, group, mode, block_m, block_n, warps, stages):
    m, k = x.shape
    n = planes16.shape[0]
    out = torch.empty(m, n, dtype=x.dtype, device=x.device)
    grid = (triton.cdiv(m, block_m) * (n // block_n),)
    _variant_kernel[grid](x, planes16, scales, zeros, out, m, n, k, x.stride(0), planes16.stride(0), scales.stride(0),
                          zeros.stride(0), out.stride(0), MODE=MODES[mode], GROUP=group, BLOCK_M=block_m,
                          BLOCK_N=block_n, USE_ASM=_use_asm(x), DOT=_dot_dtype(x.dtype), num_warps=warps,
                          num_stages=stages)  # fmt: skip
    return out


CANDIDATES = list(itertools.product(MODES, (32, 64, 128), (128, 256), (4, 8), (3, 4)))
"""(mode, block_m, block_n, num_warps, num_stages) swept per shape and row count."""


def _time_variants(x: torch.Tensor, sets: list, group: int, ref: torch.Tensor, label: str) -> dict:
    """The fastest launch of each mode on x against `sets` of (planes, scales, zeros); wrong or unbuildable
    launches are printed and skipped."""
    best: dict[str, tuple[float, str]] = {}
    planes, scales, zeros = sets[0]
    for mode, bm, bn, warps, stages in CANDIDATES:
        if bm > max(32, x.shape[0]):
            continue
        name = f"{label} {mode} {bm}x{bn} w{warps} s{stages}"

        def call(s, mode=mode, bm=bm, bn=bn, warps=warps, stages=stages):
            return variant(x, s[0].view(torch.int16), s[1], s[2], group, mode, bm, bn, warps, stages)

        try:
            out = call((planes, scales, zeros))
            err = ((out.float() - ref).abs().max() / ref.abs().max()).item()
            if err > 2e-2:
                print(f"{name}: wrong ({err:.3g})", flush=True)
                continue
            us = 1000 * gpu_time_ms(call, sets, stream_fallback=False)
        except Exception as exc:  # out of shared memory / registers for this launch
            print(f"{name}: {type(exc).__name__}", flush=True)
            continue
        if mode not in best or us < best[mode][0]:
            best[mode] = (us, f"{bm}x{bn} w{warps} s{stages}")
    return {mode: {"us": round(us, 2), "tiles": tiles} for mode, (us, tiles) in best.items()}


def baseline(shape: str, m: int, sets: list, dense: list, group: int = GROUP) -> tuple:
    """(x, the reference product, a row with cuBLAS bf16's and our Triton program's GPU us) at m rows of an
    "N:K" shape: what each int4 experiment's row starts from."""
    k = int(shape.split(":")[1])
    x = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
    planes, scales, zeros = sets[0][:3]
    ref = w4a16_linear_ref(x, planes, scales, zeros, group, packing="planes").float()
    row = {
        "shape": shape,
        "m": m,
        "bf16_us": round(1000 * gpu_time_ms(lambda w: torch.nn.functional.linear(x, w), dense), 2),
        "table_us": round(1000 * gpu_time_ms(lambda s: quant_matmul(x, s[0], s[1], s[2], "int4", group), sets), 2),
    }
    return x, ref, row


def _row(shape: str, m: int, sets: list, dense: list, group: int = GROUP) -> dict:
    x, ref, row = baseline(shape, m, sets, dense, group)
    return row | {"variants": _time_variants(x, sets, group, ref, f"{shape} m{m}")}


def random_int4(n: int, k: int, group: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Random int4 codes (n, k) int32, bf16 scales and uint8 zero points per group, on the GPU."""
    q = torch.randint(0, 16, (n, k), dtype=torch.int32, device="cuda")
    scales = (torch.rand(n, k // group, device="cuda") * 0.02 + 0.001).to(torch.bfloat16)
    zeros = torch.randint(0, 16, (n, k // group), dtype=torch.uint8, device="cuda")
    return q, scales, zeros


def sweep_shapes(
    shapes: list[str],
    rows: list[int],
    time_row: Callable[[str, int, list, list], dict],
    output: str,
    shown: tuple[str, ...] = (),
    packings: Callable[[torch.Tensor], tuple] = lambda q: (),
) -> None:
    """Each "N:K" shape of int4 weights (planes packing, scales, zeros and `packings(codes)`) and bf16
    copies, as many of each as exceed the L2 together; `time_row(shape, m, sets, dense)` per row count
    in `rows`, printed (its `shown` keys, or all) and the JSON at `output` rewritten after each."""
    from model_optimizer.common.fileio import atomic_write

    torch.manual_seed(0)
    results = []
    for shape in shapes:
        n, k = map(int, shape.split(":"))
        sets = []
        for _ in range(sets_for(n * k // 2)):
            q, scales, zeros = random_int4(n, k, GROUP)
            sets.append((pack_int4_planes(q), scales, zeros, *packings(q)))
            del q
        dense = [torch.randn(n, k, device="cuda", dtype=torch.bfloat16) for _ in range(sets_for(n * k * 2))]
        for m in rows:
            row = time_row(shape, m, sets, dense)
            print(json.dumps({key: row[key] for key in shown} if shown else row), flush=True)
            results.append(row)
            atomic_write(output, json.dumps({"gpu": torch.cuda.get_device_name(), "rows": results}, indent=1))


def shape_arguments(description: str, rows: list[int], need_output: bool = True) -> argparse.ArgumentParser:
    """The arguments these experiments share: row counts, "N:K" shapes (Llama-3.1-8B's), the JSON path."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--rows", type=int, nargs="+", default=rows)
    parser.add_argument("--shapes", nargs="+", default=["6144:4096", "4096:4096", "28672:4096", "4096:14336"])
    parser.add_argument("--output", required=need_output)
    return parser


def main() -> None:
    args = shape_arguments(__doc__.splitlines()[0], [32, 64, 128, 256]).parse_args()
    sweep_shapes(args.shapes, args.rows, _row, args.output)


if __name__ == "__main__":
    main()
