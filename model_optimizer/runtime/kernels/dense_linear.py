"""bf16 linear layers at decode sizes: our Triton GEMV or tensor-core tiles where cuBLAS is slow.

cuBLAS runs the small matrices of a small model at one token far from the bandwidth limit (Qwen3-0.6B
at batch 1, H200: o_proj 1024 x 2048 in 12.6 us, 0.33 TB/s; down_proj 7.4 us, 0.85 TB/s), and
splits some of them into two launches. The quantized matmul's program reads a bf16 weight as well
(kind "bf16": no widening, no scales), one launch with its split-K. Whether it runs is the tile
table's word (quant_tiles, benchmarks/quant_kernels.py --sweep times both): a shape and row bucket
run ours only where the sweep measured it faster than cuBLAS; everywhere else, and wherever there
is no table for this GPU, `F.linear` as before. MOPT_DENSE_KERNELS=0 turns ours off.

Where the GEMV runs an MLP's [gate | up] projection, `dense_linear_gated` has it apply silu(gate) * up
before it stores (quant_matmul's `gated`): one launch a layer fewer, and half the output written.
"""

from __future__ import annotations

import functools
import os

import torch
import torch.nn.functional as F

from model_optimizer.runtime.kernels import aot, triton_kernel
from model_optimizer.runtime.kernels.quant_tiles import row_bucket

DENSE_ENV = "MOPT_DENSE_KERNELS"


@functools.lru_cache(maxsize=4096)
def _tiles(device_index: int, bucket: int, n: int, k: int, target: aot.AotTarget | None = None):
    """The table's launch for a bf16 (bucket, N, K), or None for cuBLAS; cached: layers ask every call."""
    device_tiles = triton_kernel("quant_matmul", "choose_tiles")
    facts = triton_kernel("quant_matmul", "_device_facts")
    if device_tiles is None or os.environ.get(DENSE_ENV, "1") == "0":
        return None
    gpu, num_sms = facts(device_index)
    tiles = device_tiles(bucket, n, k, "bf16", 0, num_sms, gpu)
    return tiles if tiles.backend == "triton" else None


def _our_tiles(x: torch.Tensor, weight: torch.Tensor):
    """The table's launch for x's rows @ weight.T, or None where `F.linear` runs: off the GPU, other
    dtypes, shapes cuBLAS won, and a GEMV entry asked for more than one row."""
    if not aot.on_gpu(x) or x.dtype != torch.bfloat16 or weight.dtype != torch.bfloat16:
        return None
    num_rows = x.numel() // x.shape[-1] if x.shape[-1] else 0
    tiles = _tiles(x.device.index or 0, row_bucket(num_rows), weight.shape[0], weight.shape[1], aot.building())
    if tiles is not None and tiles.block_m == 1 and num_rows != 1:
        return None
    return tiles


def dense_linear(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None) -> torch.Tensor:
    """x @ weight.T (+ bias), as F.linear; on CUDA with bf16 tensors through our kernel where the table
    says it wins for this shape and row count."""
    tiles = _our_tiles(x, weight)
    if tiles is None:
        return F.linear(x, weight, bias)
    rows = x.reshape(-1, x.shape[-1])  # (M, K)
    out = triton_kernel("quant_matmul", "quant_matmul")(rows, weight, None, None, "bf16", 0, bias, tiles)
    return out.view(*x.shape[:-1], weight.shape[0])


def dense_linear_gated(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None) -> torch.Tensor | None:
    """silu(gate) * up of x @ [gate | up].T (+ bias), (..., N / 2), in the GEMV's own launch where
    `dense_linear` would run our GEMV for this shape (one row); None elsewhere (the caller's two steps)."""
    tiles = _our_tiles(x, weight)
    if tiles is None or not triton_kernel("quant_matmul", "gates")(tiles, weight.shape[0]):
        return None
    rows = x.reshape(-1, x.shape[-1])
    out = triton_kernel("quant_matmul", "quant_matmul")(rows, weight, None, None, "bf16", 0, bias, tiles, gated=True)
    return out.view(*x.shape[:-1], weight.shape[0] // 2)
