"""A sparse layer's post-attention norm and routing at decode sizes: one launch against three, GPU only.

`kernels/moe_routing.norm_route` (add + RMSNorm, the router's matvec, softmax top-k in one launch) at
each launch shape of CANDIDATES, against what the layer ran before it: `fused_ops.add_rms_norm`, the
router's `dense_linear`, `softmax_topk_kernel`. GPU time per call from CUDA-graph replays
(gpu_time.py), router weights rotated over 128 MB of sets (read from memory, not L2). Shapes: (hidden, experts, top_k) of the
MoE models in benchmarks/configs. Prints the fastest launch shape per shape and row count; the
JSON's `best` is what MOPT_NORM_ROUTE_TILES takes ("BLOCK_E,SPLITS,NUM_WARPS").

    PYTHONPATH=. python3 benchmarks/norm_route.py --output $OUT/norm_route_h200.json
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
sys.path.insert(0, str(Path(__file__).parent.parent))

from common import RESULTS, environment, write_json  # noqa: E402
from gpu_time import gpu_time_ms  # noqa: E402

SHAPES = {"qwen3-30b-a3b": (2048, 128, 8), "mixtral-8x7b": (4096, 8, 2), "qwen3-235b-a22b": (4096, 128, 8)}
CANDIDATES = [  # (block_e, splits, num_warps)
    (8, 8, 1),
    (8, 8, 2),
    (8, 4, 2),
    (8, 16, 1),
    (16, 8, 1),
    (16, 8, 2),
    (16, 4, 2),
    (16, 4, 4),
    (16, 16, 1),
    (32, 8, 2),
    (32, 4, 4),
    (4, 8, 1),
    (8, 2, 4),
    (4, 16, 1),
]


def measure(hidden: int, experts: int, top_k: int, rows: int) -> dict:
    import torch

    from model_optimizer.runtime.kernels import fused_ops
    from model_optimizer.runtime.kernels.dense_linear import dense_linear
    from model_optimizer.runtime.kernels.moe_routing import RouteTiles, norm_route, softmax_topk_kernel

    bf16 = dict(dtype=torch.bfloat16, device="cuda")
    x, res = torch.randn(rows, hidden, **bf16), torch.randn(rows, hidden, **bf16)
    norm_w = torch.ones(hidden, **bf16)
    sets = [
        torch.randn(experts, hidden, **bf16) / hidden**0.5 for _ in range(max(2, (32 << 20) // (experts * hidden * 2)))
    ]

    def separate(router):
        h, _ = fused_ops.add_rms_norm(x, res, norm_w, 1e-6)
        return softmax_topk_kernel(dense_linear(h, router), top_k, True)

    result = {"hidden": hidden, "experts": experts, "top_k": top_k, "rows": rows}
    result["separate_us"] = gpu_time_ms(separate, sets, max_launches=len(sets)) * 1e3
    want = separate(sets[0])
    fused = {}
    for cand in CANDIDATES:
        tiles = RouteTiles(*cand)
        got = norm_route(x, res, norm_w, 1e-6, sets[0], top_k, True, tiles)
        if got is None or not torch.equal(got[3], want[1]):  # routing must agree with the separate steps
            fused[",".join(map(str, cand))] = None
            continue
        fused[",".join(map(str, cand))] = (
            gpu_time_ms(lambda router, t=tiles: norm_route(x, res, norm_w, 1e-6, router, top_k, True, t), sets) * 1e3
        )
    result["fused_us"] = fused
    timed = {k: v for k, v in fused.items() if v is not None}
    result["best"] = min(timed, key=timed.get) if timed else None
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, nargs="+", default=[1, 4])
    parser.add_argument("--output", default=str(RESULTS / "norm_route.json"))
    args = parser.parse_args()
    rows = []
    for model, (hidden, experts, top_k) in SHAPES.items():
        for m in args.rows:
            r = {"model": model, **measure(hidden, experts, top_k, m)}
            rows.append(r)
            best = r["best"]
            print(
                f"{model} rows {m}: separate {r['separate_us']:.2f} us, fused best {best} "
                f"{r['fused_us'][best]:.2f} us, default {r['fused_us']['8,8,1']}",
                flush=True,
            )
    write_json(args.output, {"benchmark": "norm_route", "environment": environment(), "rows": rows})


if __name__ == "__main__":
    main()
