"""Could one fixed launch of our program be the default rule instead of cuBLAS? Read from a committed sweep.

The default rule (quant_tiles.default_tiles) runs shapes without a table entry. From the 128-row bucket, where
the caller accepts quantized activations, it takes cuBLAS's GEMM: `_int_mm` for int8, `_scaled_mm` for fp8.
A sweep (`quant_kernels.py --sweep`) timed every launch candidate on every shape it covers, so the question
needs no GPU: for each launch shape of our program (tiles, warps, stages; split-K as the candidate's rule
sets it per shape) timed on every shape of a bucket, its GPU time against cuBLAS's, shape by shape.

    python benchmarks/fixed_launch_default.py SWEEP.json[.gz] --kind int8 --baseline int_mm \
        --output results/kernels_h200/fixed_launch_default/int8.json

A launch that beats cuBLAS in total only on the large shapes (which a table covers anyway) and loses on the
small ones (which the default rule is for) is no better default.
"""

from __future__ import annotations

import argparse
import collections
import gzip
import json
from pathlib import Path

from common import write_json


def load(path: Path) -> dict:
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rt") as f:
        return json.load(f)


def launch_name(row: dict) -> str:
    """A launch shape as the tables spell it: kernel, tokens x weight rows x K tile, warps, stages, and the
    accumulators where more than one. Split-K is left out: the candidate's rule sets it per shape, so two
    candidates that differ only in their split would merge (the faster kept per shape); none do in the
    int8 and fp8 sweeps, int4's do (hence --kind int8 or fp8)."""
    t = row["tiles"]
    if row["kernel"] in ("int_mm", "scaled_mm", "dequant"):
        return row["kernel"]
    name = f"{row['kernel']} {t['block_m']}x{t['block_n']}x{t['block_k']} w{t['num_warps']} s{t['num_stages']}"
    return name + f" a{t['accumulators']}" if t.get("accumulators", 1) > 1 else name


def compare(sweep: list[dict], kind: str, baseline: str, bucket: int, top: int) -> dict:
    """Every launch timed on all the bucket's shapes, ranked by its total GPU time, against `baseline`."""
    times: dict[str, dict[str, float]] = collections.defaultdict(dict)
    for row in sweep:
        if row.get("kind") != kind or row.get("m") != bucket or row["kernel"] == "dequant":
            continue  # the widened weight cannot run inside a CUDA graph: no default for decode
        shape = f"{row['model']} {row['linear']}"
        us = row["ms"] * 1000
        times[launch_name(row)][shape] = min(us, times[launch_name(row)].get(shape, us))
    if baseline not in times:
        raise SystemExit(f"no {baseline} rows for {kind} at {bucket} rows in this sweep")
    base = {s: round(us, 2) for s, us in times[baseline].items()}
    shapes = sorted(base)
    ranked = []
    for name, by_shape in times.items():
        if name == baseline or set(by_shape) != set(shapes):
            continue
        ratios = {s: by_shape[s] / base[s] for s in shapes}
        ranked.append(
            {
                "launch": name,
                "total_us": round(sum(by_shape.values()), 2),
                "wins": sum(r < 1 for r in ratios.values()),
                "worst_ratio": round(max(ratios.values()), 3),
                "worst_shape": max(ratios, key=ratios.get),
                "us": {s: round(by_shape[s], 2) for s in shapes},
            }
        )
    ranked.sort(key=lambda r: r["total_us"])
    return {
        "bucket": bucket,
        "shapes": shapes,
        "baseline": {"launch": baseline, "total_us": round(sum(base.values()), 2), "us": base},
        "launches": ranked[:top],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("sweep", type=Path, help="a quant_kernels.py --sweep result (.json or .json.gz)")
    parser.add_argument("--kind", required=True, choices=["int8", "fp8"], help="the sweep's format")
    parser.add_argument("--baseline", required=True, help="the launch the default rule takes: int_mm, scaled_mm")
    parser.add_argument("--buckets", nargs="+", type=int, default=[128, 256])
    parser.add_argument("--top", type=int, default=5, help="launches kept per bucket, fastest total first")
    parser.add_argument("--output", required=True)
    args = parser.parse_args()
    data = load(args.sweep)
    result = {
        "benchmark": "fixed_launch_default",
        "sweep": str(args.sweep),
        "gpu": data.get("environment", {}).get("gpu"),
        "kind": args.kind,
        "buckets": [compare(data["sweep"], args.kind, args.baseline, b, args.top) for b in args.buckets],
    }
    write_json(args.output, result)
    for b in result["buckets"]:
        print(f"{args.kind} at {b['bucket']} rows: {args.baseline} {b['baseline']['total_us']} us over "
              f"{len(b['shapes'])} shapes")  # fmt: skip
        for r in b["launches"]:
            print(f"  {r['launch']:36s} {r['total_us']:8.1f} us, faster on {r['wins']}/{len(b['shapes'])}, "
                  f"worst {r['worst_ratio']:.2f}x ({r['worst_shape']})")  # fmt: skip


if __name__ == "__main__":
    main()
