"""Compile the quantized matmul's launch shapes for sm_90 (H100/H200) without a GPU.

Run by test_quant_compile_sm90.py in a subprocess without TRITON_INTERPRET. The sweep skips a
candidate the GPU compiler rejects, but the default rule must never pick one: this compiles each
distinct (format, tiles, warps, stages, one split or several) that `default_tiles` produces at
Qwen3-0.6B's and Llama-3.1-8B's shapes, with bf16 activations (`--all`: every sweep candidate too,
about 60 compiles). Prints one line per kernel with its shared memory; exit status 3 when Triton
has no ahead-of-time API.
"""

import sys

from compile_sm90 import quant_matmul  # same folder: the script runs with it on sys.path

from model_optimizer.runtime.kernels.quant_kernels import KINDS
from model_optimizer.runtime.kernels.quant_tiles import ROW_BUCKETS, candidates, default_tiles

SHAPES = [(4096, 1024), (1024, 2048), (6144, 1024), (1024, 3072), (6144, 4096), (4096, 4096), (28672, 4096)]
ROWS = {1: 1, 16: 8, 64: 64, 512: 512}
SMEM_LIMIT = 227 * 1024  # an H100/H200 block's dynamic shared memory


def compile_tiles(kind: str, tiles, one_split: bool) -> dict:
    planes = tiles.planes or kind != "int4" or tiles.block_m == 1
    kernel = quant_matmul(
        kind,
        tiles.block_m,
        tiles.block_n,
        tiles.block_k,
        1 if one_split else 2,
        num_stages=tiles.num_stages,
        num_warps=tiles.num_warps,
        planes=planes,
        quiet=True,
    )
    return {"shared": kernel.metadata.shared}


def main() -> int:
    seen = set()
    for kind in KINDS:
        for n, k in SHAPES:
            for bucket in ROW_BUCKETS:
                m = ROWS[bucket]
                found = [default_tiles(kind, m, n, k, 132)]
                if "--all" in sys.argv:
                    found += candidates(kind, m, n, k, 132)
                for tiles in found:
                    key = (kind, tiles.block_m, tiles.block_n, tiles.block_k, tiles.num_warps, tiles.num_stages)
                    key += (tiles.split_k == 1, tiles.planes)
                    if key in seen:
                        continue
                    seen.add(key)
                    meta = compile_tiles(kind, tiles, tiles.split_k == 1)
                    status = "ok" if meta["shared"] <= SMEM_LIMIT else "TOO MUCH SHARED MEMORY"
                    print("quant", key, "shared", meta["shared"], status, flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
