"""Compile the quantized matmul's launch shapes for sm_90 (H100/H200) without a GPU, and read their SASS.

Run by test_quant_compile_sm90.py in a subprocess without TRITON_INTERPRET. The sweep skips a
candidate the GPU compiler rejects, but the default rule must never pick one: this compiles each
distinct (format, tiles, warps, stages, one split or several) that `default_tiles` produces at
Qwen3-0.6B's and Llama-3.1-8B's shapes for the decode row buckets, with bf16 activations and the
PTX widening (`--all`: every sweep candidate too). For each it checks the main loop of the SASS:
tensor-core tiles must multiply on Hopper's warp-group MMA (HGMMA; QGMMA for e4m3 x e4m3, IGMMA for
int8 x int8; HMMA, the older mma.sync, for int4 tiles of fewer than 4 warps), the GEMV
must not, and nothing may spill to local memory. Prints one line per kernel; exit status 3 when
Triton has no ahead-of-time API.
"""

import collections
import re
import sys

from compile_sm90 import (  # same folder: the script runs with it on sys.path
    SMEM_LIMIT,
    disassemble,
    main_loop,
    quant_matmul,
)

from model_optimizer.runtime.kernels.quant_tiles import ROW_BUCKETS, candidates, default_tiles

SHAPES = [(4096, 1024), (1024, 2048), (6144, 1024), (1024, 3072), (6144, 4096), (4096, 4096), (28672, 4096)]


def check(kind: str, tiles) -> tuple[dict, list[str]]:
    """(facts, problems) of one launch shape compiled for sm_90."""
    kernel = quant_matmul(
        kind,
        tiles.block_m,
        tiles.block_n,
        tiles.block_k,
        tiles.split_k,
        num_stages=tiles.num_stages,
        num_warps=tiles.num_warps,
        w8a8=tiles.w8a8,
        quiet=True,
        accs=tiles.accumulators,
        max_registers=tiles.max_registers,
    )
    sass, regs = disassemble(kernel.asm["cubin"])
    loop = collections.Counter(op.split(".")[0] for op in main_loop(sass))
    ops = collections.Counter(re.findall(r"\b([HQI]GMMA|HMMA)\.", sass))
    facts = {"shared": kernel.metadata.shared, "regs": regs, "mma": dict(ops), "loop": len(list(loop.elements()))}
    facts["spills"] = sass.count("LDL") + sass.count("STL")
    problems = []
    if facts["shared"] > SMEM_LIMIT:
        problems.append("TOO MUCH SHARED MEMORY")
    if facts["spills"]:
        problems.append("SPILLS")
    if tiles.w8a8:
        want = "IGMMA" if kind == "int8" else "QGMMA"
    else:  # fewer than a warp group's 4 warps: mma.sync
        want = "HGMMA" if tiles.num_warps >= 4 else "HMMA"
    if tiles.kernel != "gemv" and not ops[want]:
        problems.append(f"NO {want}")
    if tiles.kernel == "gemv" and ops:
        problems.append("MMA IN THE GEMV")
    return facts, problems


def main() -> int:
    seen = set()
    for kind in ("int4", "int8", "fp8"):
        for n, k in SHAPES:
            for bucket in ROW_BUCKETS[:-1]:  # the decode buckets; above 256 rows the default is a dense matmul
                found = [default_tiles(kind, bucket, n, k, 132)]
                if "--all" in sys.argv:
                    found += candidates(kind, bucket, n, k, 132, w8a8=True)
                for tiles in found:
                    if tiles.backend != "triton":
                        continue
                    key = (kind, *tiles.compile_key, tiles.split_k == 1)
                    if key in seen:
                        continue
                    seen.add(key)
                    facts, problems = check(kind, tiles)
                    print("quant", key, facts, " ".join(problems) or "ok", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
