"""Static cost of each quantized-matmul launch shape on sm_90, from its SASS, without a GPU.

    PYTHONPATH=. python3 benchmarks/quant_sass.py [--all] [--output FILE]

Compiles the quantized matmul (`quant_kernels._quant_matmul_kernel`, PTX widening on, bf16
activations) for an H100/H200 with Triton's own ptxas, disassembles it with its nvdisasm and reads
the main K loop (the longest backward branch): instructions per 1,000 weights (warp instructions:
loop length x warps / weights an iteration), the tensor-core instructions in it (HGMMA: bf16/fp16
warp-group MMA; QGMMA: fp8; IGMMA: int8; HMMA: the older mma.sync), shared-memory stores in the loop (STS: an
operand that went through shared memory instead of straight into registers), local-memory traffic
(LDL/STL: register spills), registers and shared memory. A GPU does about 132 SMs x 4 schedulers x
1.98 GHz = 1.05e12 warp instructions a second, so 100 per 1,000 weights is ~10 us for Llama's 117 M
gate_up weights, against 13 us to read them as int4 at 4.5 TB/s: the figure says whether a shape
can be bandwidth-bound at all. The sweep on the GPU (quant_kernels.py --sweep) measures which is.

Default: the candidates of `quant_tiles.candidates` for Llama-3.1-8B's gate_up (28672 x 4096) per
row bucket and format (`--all`: also the other Llama and Qwen3-0.6B shapes' distinct ones).
For a split-K launch, `split_sum` reads the last split's sum of the partials (after the split counter's
atomic): its instructions, its loads, and the most loads issued before an add (the loads in flight).
Writes JSON (default benchmarks/results/quant_sass_sm90.json); about 2-4 s a compile on one core.
"""

from __future__ import annotations

import argparse
import collections
import re
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "runtime" / "kernels"))

from common import RESULTS, write_json  # noqa: E402

SHAPES = {"gate_up": (28672, 4096), "qkv": (6144, 4096), "o": (4096, 4096), "down": (4096, 14336)}
QWEN_SHAPES = {
    "qwen_qkv": (4096, 1024),
    "qwen_o": (1024, 2048),
    "qwen_gate_up": (6144, 1024),
    "qwen_down": (1024, 3072),
}
ROWS = {1: 1, 2: 2, 4: 4, 8: 8, 16: 16, 32: 32, 64: 64, 128: 128, 256: 256, 512: 512}


def measure(kind: str, tiles) -> dict:
    """Static costs of one launch shape (tiles: quant_tiles.QuantTiles)."""
    from compile_sm90 import disassemble, main_loop, quant_matmul, split_sum

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
    k_step = 128 if kind == "int4" and tiles.block_m > 1 else tiles.block_k
    weights = tiles.block_n * k_step
    return {
        "per_1k_weights": round(sum(loop.values()) * tiles.num_warps / weights * 1000, 1),
        "loop_instructions": sum(loop.values()),
        "tensor_core": {op: loop[op] for op in ("HGMMA", "QGMMA", "IGMMA", "HMMA") if loop[op]},
        "shared_stores_in_loop": loop["STS"],
        "spills": sum(op in ("LDL", "STL") for op in re.findall(r"\b(LDL|STL)\b", sass)),
        "registers": regs,
        "shared_bytes": kernel.metadata.shared,
        "top": dict(loop.most_common(8)),
        **({"split_sum": split_sum(sass)} if tiles.split_k > 1 else {}),
    }


def cases(all_shapes: bool) -> list[tuple[str, int, object]]:
    """(kind, bucket, tiles) distinct per kernel build (split counts differ only in a runtime value)."""
    from model_optimizer.runtime.kernels.quant_tiles import candidates

    shapes = {**SHAPES, **QWEN_SHAPES} if all_shapes else {"gate_up": SHAPES["gate_up"]}
    seen: dict[tuple, tuple] = {}
    for kind in ("int4", "int8", "fp8"):
        for n, k in shapes.values():
            for bucket, m in ROWS.items():
                for tiles in candidates(kind, m, n, k, 132, w8a8=True):
                    if tiles.backend != "triton":
                        continue
                    seen.setdefault((kind, *tiles.compile_key, tiles.split_k == 1), (kind, bucket, tiles))
    return list(seen.values())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--all", action="store_true", help="the candidates of every Llama-3.1-8B and Qwen3-0.6B shape")
    parser.add_argument("--output", default=str(RESULTS / "quant_sass_sm90.json"))
    args = parser.parse_args()
    import triton

    rows, started = [], time.time()
    for kind, bucket, tiles in cases(args.all):
        row = {"kind": kind, "bucket": bucket, "kernel": tiles.kernel, "tiles": vars(tiles)}
        try:
            row.update(measure(kind, tiles))
        except Exception as exc:  # a shape ptxas refuses is a result too
            row["error"] = str(exc)[-300:]
        rows.append(row)
        t = tiles
        print(
            f"{kind:4s} {t.kernel:5s} m{t.block_m:<3d} n{t.block_n:<3d} k{t.block_k:<4d} w{t.num_warps} st{t.num_stages} "
            + (
                f"{row['per_1k_weights']:6.1f}/1k  tc {row['tensor_core']}  sts {row['shared_stores_in_loop']}  "
                f"spills {row['spills']}  regs {row['registers']}  smem {row['shared_bytes']}"
                if "error" not in row
                else "ERROR " + row["error"][-120:]
            ),
            flush=True,
        )
    write_json(
        args.output,
        {
            "benchmark": "quant_sass",
            "triton": triton.__version__,
            "target": "sm_90",
            "rows": rows,
            "seconds": round(time.time() - started, 1),
        },  # fmt: skip
    )


if __name__ == "__main__":
    main()
