"""Probe: one quantized-matmul launch at batch 1, for ncu or timed from graph replays.

    python3 scripts/device/int4_b1_probe.py CASE [--time]
    python3 scripts/device/int4_b1_probe.py --splits OUT.json

CASE names a (kind, N, K, tiles) below. Without --time it calls the launch a few times (ncu picks one
with --launch-skip); with --time it prints the GPU us of one call (gpu_time, weights rotated past L2).
--splits times int4 at one row on each Llama-3.1-8B linear over split counts the tile table's
candidates do not reach (their split comes from a few wave targets), for the tensor-core tiles and
the GEMVs, and writes every timing.
"""

import json
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
from gpu_time import gpu_time_ms, sets_for  # noqa: E402
from quant_kernels import _runner, make_weights  # noqa: E402

from model_optimizer.runtime.kernels.quant_tiles import QuantTiles  # noqa: E402

CASES = {
    "int4_gate_up_mma": ("int4", 28672, 4096, QuantTiles(16, 128, 128, 5, 4, 3)),
    "int4_gate_up_gemv": ("int4", 28672, 4096, QuantTiles(1, 64, 256, 2, 4, 1)),
    "int4_down_mma": ("int4", 4096, 14336, QuantTiles(16, 128, 128, 16, 4, 3)),
    "int4_qkv_gemv": ("int4", 6144, 4096, QuantTiles(1, 64, 256, 6, 4, 1)),
    "int8_gate_up_gemv": ("int8", 28672, 4096, QuantTiles(1, 16, 256, 1, 4, 2)),
}


def weights(kind: str, n: int, k: int, copies: int) -> list[tuple]:
    """(qweight, scales, zeros or None) sets in the layout the layers hold (quant_kernels.make_weights)."""
    return [(w[0], w[1], w[2] if kind == "int4" else None) for w in make_weights(kind, n, k, copies)]


SHAPES = {"qkv": (6144, 4096), "o": (4096, 4096), "gate_up": (28672, 4096), "down": (4096, 14336)}
FAMILIES = [  # (block_m, block_n, block_k, num_warps, num_stages)
    (16, 128, 128, 4, 2),
    (16, 128, 128, 4, 3),
    (16, 128, 128, 4, 4),
    (1, 64, 256, 4, 1),
    (1, 64, 256, 4, 2),
    (1, 128, 256, 4, 2),
]


def split_sweep(path: str) -> None:
    rows = []
    for linear, (n, k) in SHAPES.items():
        x = torch.randn(1, k, device="cuda").bfloat16()
        sets = weights("int4", n, k, sets_for(n * k // 2))
        for bm, bn, bk, warps, stages in FAMILIES:
            step = 128 if bm > 1 else bk
            for split in [s for s in (1, 2, 3, 4, 5, 6, 7, 8, 10, 12, 14, 16) if k // step >= s]:
                tiles = QuantTiles(bm, bn, bk, split, warps, stages)

                def call(ws, run=_runner("int4", tiles), x=x):
                    return run(x, *ws)

                us = gpu_time_ms(call, sets, target_ms=4.0, samples=2) * 1000
                rows.append({"linear": linear, "n": n, "k": k, "tiles": vars(tiles), "us": round(us, 2)})
                print(
                    f"{linear:8s} {bm:3d} {bn:4d} {bk:4d} w{warps} st{stages} split {split:2d}: {us:7.2f} us",
                    flush=True,
                )
        del sets
    best = {}
    for r in rows:
        if r["linear"] not in best or r["us"] < best[r["linear"]]["us"]:
            best[r["linear"]] = r
    Path(path).write_text(json.dumps({"rows": rows, "best": best}, indent=1))
    for linear, r in best.items():
        print("best", linear, r["tiles"], r["us"])


def main() -> None:
    if sys.argv[1] == "--splits":
        return split_sweep(sys.argv[2])
    name = sys.argv[1]
    kind, n, k, tiles = CASES[name]
    x = torch.randn(1, k, device="cuda").bfloat16()
    nbytes = n * k // (2 if kind == "int4" else 1)
    sets = weights(kind, n, k, sets_for(nbytes) if "--time" in sys.argv else 1)

    run = _runner(kind, tiles)

    def call(ws):
        return run(x, *ws)

    if "--time" in sys.argv:
        us = gpu_time_ms(call, sets) * 1000
        print(f"{name}: {us:.2f} us, {nbytes / us / 1e6:.2f} TB/s of weights")
    else:
        for _ in range(4):
            call(sets[0])
        torch.cuda.synchronize()


if __name__ == "__main__":
    main()
