"""Per-linear profile of a decode step, from a tile table: each linear's GPU time against its bytes.

    python3 benchmarks/linear_profile.py [--table FILE] [--model llama-3.1-8b] [--rows 1 64 256]
        [--methods bf16 fp8 int8 int8-w8a8 int4] [--output FILE]

No GPU needed: a tile table (default the committed `model_optimizer/runtime/kernels/quant_tiles.json`)
records, per format, row bucket and weight shape, the launch the sweep found fastest and its GPU time
(`us`: graph replays of back-to-back calls whose weights together exceed the L2, so each reads HBM;
benchmarks/quant_kernels.py --sweep). For each linear of one decoder layer of `--model` this prints and
writes that time, the bytes the linear must move and the rate that makes, and the same summed over the
layers: the linears' share of a decode step, the first thing to read when a step misses its target.

The entry read is the one the engine takes for a method at that many rows: `fp8` from
FP8_W8A8_MIN_ROWS rows the fastest launch of all (format `fp8a`, W8A8 included), weight-only below;
`int8-w8a8` the same with `int8a`; plain `int8` weight-only; `int4` and `bf16` their own formats
(bf16's entries, our program against cuBLAS, stop at DENSE_MAX_ROWS: above, cuBLAS runs and the table
has no time). Bytes: the weights in the layers' layout (bf16 2 bytes a weight; fp8 and int8 1 byte and
a float32 scale a row; int4 half a byte and, per 128 weights, a bf16 scale and a uint8 zero point),
plus x read and y written in bf16. `floor_us`: those bytes at --peak-gbps (the H200's HBM peak).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from common import RESULTS, write_json
from quant_kernels import GROUP_SIZE, HBM_PEAK_GBPS, layer_shapes

TABLE = Path(__file__).resolve().parent.parent / "model_optimizer" / "runtime" / "kernels" / "quant_tiles.json"
METHODS = ("bf16", "fp8", "int8", "int8-w8a8", "int4")


def table_format(method: str, rows: int) -> str:
    """The table format whose entry the engine runs for `method` at `rows` rows."""
    from model_optimizer.runtime.kernels.quant_linear import FP8_W8A8_MIN_ROWS, INT8_W8A8_MIN_ROWS
    from model_optimizer.runtime.kernels.quant_tiles import FP8_ANY, INT8_ANY

    if method == "fp8":
        return FP8_ANY if rows >= FP8_W8A8_MIN_ROWS else "fp8"
    if method == "int8-w8a8":
        return INT8_ANY if rows >= INT8_W8A8_MIN_ROWS else "int8"
    return method


def weight_bytes(method: str, n: int, k: int) -> int:
    """Bytes of one (N, K) weight in the layout the layers hold."""
    if method == "bf16":
        return 2 * n * k
    if method == "int4":
        return n * k // 2 + (n * k // GROUP_SIZE) * 3  # codes; a bf16 scale and a uint8 zero per group
    return n * k + 4 * n  # fp8 / int8: a byte a weight, a float32 scale a row


def profile(table: dict, model: str, method: str, rows: int, peak_gbps: float) -> dict:
    """One method at one row bucket: per linear and per step (None where the table has no time)."""
    from model_optimizer.runtime.kernels.quant_tiles import QuantTiles, table_key

    cfg = json.loads((Path(__file__).parent / "configs" / model / "config.json").read_text())
    layers = cfg["num_hidden_layers"]
    if "router" in layer_shapes(model):  # the experts run in the fused MoE kernel, which no tile table times
        raise SystemExit(f"{model} is a mixture of experts: this profile covers dense decoders only")
    fmt = table_format(method, rows)
    linears, missing = [], []
    for name, (n, k) in layer_shapes(model).items():
        key = table_key(fmt, rows, n, k)
        us = table["us"].get(key)
        if us is None:
            missing.append(key)
            continue
        moved = weight_bytes(method, n, k) + 2 * rows * (n + k)
        tiles = QuantTiles(**table["entries"][key])
        launch = tiles.kernel if tiles.backend != "triton" else f"{tiles.kernel} {tiles.block_n}x{tiles.block_m}"
        linears.append(
            {
                "linear": name,
                "n": n,
                "k": k,
                "table_key": key,
                "launch": launch + (f" split {tiles.split_k}" if tiles.split_k > 1 else ""),
                "us": us,
                "mb": round(moved / 1e6, 2),
                "tb_s": round(moved / us / 1e6, 3),
                "floor_us": round(moved / peak_gbps / 1e3, 2),
            }
        )
    result = {"method": method, "rows": rows, "format": fmt, "layers": layers, "linears": linears}
    if missing:
        result["missing"] = missing
        return result
    layer_us = sum(r["us"] for r in linears)
    layer_floor = sum(r["floor_us"] for r in linears)
    result |= {
        "layer_us": round(layer_us, 2),
        "step_linears_ms": round(layer_us * layers / 1e3, 3),
        "step_floor_ms": round(layer_floor * layers / 1e3, 3),
        "of_floor": round(layer_us / layer_floor, 2),
    }
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--table", type=Path, default=TABLE)
    parser.add_argument("--model", default="llama-3.1-8b")
    parser.add_argument("--rows", type=int, nargs="+", default=[1, 64, 256])
    parser.add_argument("--methods", nargs="+", choices=METHODS, default=list(METHODS))
    parser.add_argument("--peak-gbps", type=float, default=HBM_PEAK_GBPS)
    parser.add_argument("--output", type=Path, default=RESULTS / "linear_profile_h200.json")
    args = parser.parse_args()
    table = json.loads(args.table.read_text())
    results = [profile(table, args.model, m, r, args.peak_gbps) for r in args.rows for m in args.methods]
    for res in results:
        head = f"{args.model} {res['method']} at {res['rows']} rows (table format {res['format']})"
        if "missing" in res:
            print(f"{head}: not in the table ({', '.join(res['missing'])})")
            continue
        print(
            f"{head}: {res['layer_us']} us a layer, {res['step_linears_ms']} ms a step "
            f"({res['of_floor']}x the {res['step_floor_ms']} ms floor)"
        )
        for r in res["linears"]:
            print(f"  {r['linear']:<13} {r['us']:>7} us {r['mb']:>7} MB {r['tb_s']:>6} TB/s  {r['launch']}")
    payload = {
        "benchmark": "linear_profile",
        "table": str(args.table.name),
        "table_gpu": table.get("gpu"),
        "model": args.model,
        "peak_gbps": args.peak_gbps,
        "results": results,
    }
    write_json(args.output, payload)
    print(f"wrote {args.output}", file=sys.stderr)


if __name__ == "__main__":
    main()
