"""Quantized linear kernels against bf16 F.linear at real model shapes (gpt-fast style: GB/s beside ms).

    PYTHONPATH=. python3 benchmarks/quant_kernels.py [--output FILE] [--sweep]

For each linear of one decoder layer of Qwen3-0.6B and Llama-3.1-8B (fused qkv, o, fused gate_up,
down) and M = 1, 8, 64, 512 rows, per method (bf16 `F.linear`; `fp8_linear`; `w8a16_linear`;
`w4a16_linear` at group 128; and `fp8_scaled_mm`, the W8A8 `torch._scaled_mm` path forced at every M,
to show where the GEMV wins): the median time of one call (triton.testing.do_bench, which flushes L2
before each call; on top of that every call takes the next of several weight copies that together
exceed L2), the weight bytes read per second and TFLOP/s. `per_step` sums one layer's four linears
times the number of layers: the linear work of one decode step at batch M, the first indicator for
the issue's targets (Llama-3.1-8B at batch 1: fp8 <= 2.5 ms, int4 <= 1.5 ms per step; bf16 4.76 ms).
`--sweep` also times a few tile shapes per format at M = 1 and 8 on Llama's shapes, to tune
`quant_matmul.choose_tiles`.
"""

from __future__ import annotations

import argparse
import json
import math
import time

from common import CONFIGS, RESULTS, environment, write_json

M_VALUES = [1, 8, 64, 512]
METHODS = ["bf16", "fp8", "int8", "int4", "fp8_scaled_mm"]
ROTATE_BYTES = 256 << 20  # weight copies per case: together larger than any L2 (H200: 60 MB)
GROUP_SIZE = 128


def layer_shapes(model: str) -> dict[str, tuple[int, int]]:
    """(N, K) of one decoder layer's linears, from the model's config.json."""
    cfg = json.loads((CONFIGS / model / "config.json").read_text())
    hidden, heads, kv_heads = cfg["hidden_size"], cfg["num_attention_heads"], cfg["num_key_value_heads"]
    head_dim = cfg.get("head_dim") or hidden // heads
    inter = cfg["intermediate_size"]
    return {
        "qkv_proj": ((heads + 2 * kv_heads) * head_dim, hidden),
        "o_proj": (hidden, heads * head_dim),
        "gate_up_proj": (2 * inter, hidden),
        "down_proj": (hidden, inter),
    }


def make_weights(method: str, n: int, k: int, copies: int) -> list[tuple]:
    """`copies` independent weight sets of the method's layout (random, quantized on the GPU)."""
    import torch

    from model_optimizer.kernels import quant_reference as ref

    sets = []
    for i in range(copies):
        w = torch.randn(n, k, device="cuda", generator=torch.Generator("cuda").manual_seed(i)).bfloat16()
        if method == "bf16":
            sets.append((w,))
        elif method in ("fp8", "fp8_scaled_mm"):
            sets.append(ref.quantize_fp8_weight(w))
        elif method == "int8":
            sets.append(ref.quantize_int8(w))
        else:
            sets.append(ref.quantize_int4(w, GROUP_SIZE))
        del w
    return sets


def call(method: str):
    """The function that runs `method` on (x, *weight_set)."""
    import torch.nn.functional as F

    from model_optimizer.kernels import quant_linear

    if method == "bf16":
        return lambda x, w: F.linear(x, w)
    if method == "fp8":
        return quant_linear.fp8_linear
    if method == "fp8_scaled_mm":
        return lambda x, q, s: quant_linear._scaled_mm_w8a8(x, q, s, None)
    if method == "int8":
        return quant_linear.w8a16_linear
    return lambda x, q, s, z: quant_linear.w4a16_linear(x, q, s, z, GROUP_SIZE)


def time_ms(fn, x, sets: list[tuple]) -> float:
    """Median ms of one call; each call takes the next weight set."""
    from triton.testing import do_bench

    state = {"i": 0}

    def step():
        state["i"] = (state["i"] + 1) % len(sets)
        fn(x, *sets[state["i"]])

    return do_bench(step, warmup=10, rep=40, return_mode="median")


def bench_case(method: str, n: int, k: int, m_values: list[int]) -> list[dict]:
    import torch

    one = make_weights(method, n, k, 1)
    weight_bytes = sum(t.numel() * t.element_size() for t in one[0])
    copies = max(2, min(64, math.ceil(ROTATE_BYTES / weight_bytes)))
    sets = one + make_weights(method, n, k, copies - 1)
    fn = call(method)
    rows = []
    for m in m_values:
        if method == "fp8_scaled_mm" and torch.cuda.get_device_capability() < (8, 9):
            continue  # no fp8 tensor cores
        x = torch.randn(m, k, device="cuda").bfloat16()
        ms = time_ms(fn, x, sets)
        rows.append(
            {
                "method": method,
                "n": n,
                "k": k,
                "m": m,
                "ms": ms,
                "weight_bytes": weight_bytes,
                "weight_gbps": weight_bytes / ms / 1e6,
                "tflops": 2 * m * n * k / ms / 1e9,
            }
        )
    del sets
    torch.cuda.empty_cache()
    return rows


def per_step(rows: list[dict], shapes: dict, num_layers: int) -> list[dict]:
    """Sum over one layer's linears times the layers, per method and M: linear ms per decode step."""
    out = []
    for method in METHODS:
        for m in M_VALUES:
            times = [
                r["ms"] for r in rows if r["method"] == method and r["m"] == m and (r["n"], r["k"]) in shapes.values()
            ]
            if len(times) == len(shapes):
                out.append({"method": method, "m": m, "ms_per_step": sum(times) * num_layers})
    return out


def sweep(model: str) -> list[dict]:
    """A few launch shapes per format at decode sizes; the default `choose_tiles` pick marked."""
    import torch

    from model_optimizer.kernels import quant_matmul as qk

    rows = []
    num_sms = torch.cuda.get_device_properties(0).multi_processor_count
    for kind in ("int4", "int8", "fp8"):
        for name, (n, k) in layer_shapes(model).items():
            sets = [(w[0], w[1], w[2] if kind == "int4" else None) for w in make_weights(kind, n, k, 4)]
            for m in (1, 8):
                default = qk.choose_tiles(m, n, k, kind, GROUP_SIZE, num_sms)
                x = torch.randn(m, k, device="cuda").bfloat16()
                for block_n in (16, 32, 64, 128):
                    for split in sorted({1, default.split_k, 2 * default.split_k}):
                        tiles = qk.QuantTiles(default.block_m, block_n, default.block_k, split)
                        fn = lambda x, q, s, z, t=tiles, kind=kind: qk.quant_matmul(
                            x, q, s, z, kind, GROUP_SIZE, None, t
                        )  # noqa: E731
                        row = {
                            "kind": kind,
                            "linear": name,
                            "n": n,
                            "k": k,
                            "m": m,
                            "tiles": vars(tiles),
                            "default": tiles == default,
                        }
                        try:
                            row["ms"] = time_ms(fn, x, sets)
                        except Exception as exc:  # a launch shape the compiler rejects is a result too
                            row["error"] = str(exc)[:200]
                        rows.append(row)
            del sets
            torch.cuda.empty_cache()
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--models", nargs="+", default=["llama-3.1-8b", "qwen3-0.6b"])
    parser.add_argument("--methods", nargs="+", default=METHODS, choices=METHODS)
    parser.add_argument("--m", nargs="+", type=int, default=M_VALUES)
    parser.add_argument("--sweep", action="store_true", help="also time a few tile shapes at M = 1 and 8 (Llama)")
    parser.add_argument("--output", default=str(RESULTS / "quant_kernels_h200.json"))
    args = parser.parse_args()
    result = {
        "benchmark": "quant_kernels",
        "environment": environment(),
        "config": vars(args),
        "rows": [],
        "per_step": {},
    }
    started = time.time()
    for model in args.models:
        cfg = json.loads((CONFIGS / model / "config.json").read_text())
        shapes = layer_shapes(model)
        for method in args.methods:
            for name, (n, k) in shapes.items():
                rows = bench_case(method, n, k, args.m)
                for row in rows:
                    row.update(model=model, linear=name)
                    print(
                        f"{model} {name:12s} {method:13s} M={row['m']:4d} {row['ms'] * 1e3:8.1f} us "
                        f"{row['weight_gbps']:7.0f} GB/s {row['tflops']:6.1f} TFLOP/s",
                        flush=True,
                    )
                result["rows"] += rows
            result["per_step"][model] = per_step(
                [r for r in result["rows"] if r["model"] == model], shapes, cfg["num_hidden_layers"]
            )
            write_json(args.output, result)  # results so far survive a timeout
    for model, steps in result["per_step"].items():
        print(f"== {model}: linear ms per decode step (layers x one layer's linears)")
        for row in steps:
            print(f"  {row['method']:13s} M={row['m']:4d} {row['ms_per_step']:8.3f} ms")
    if args.sweep:
        result["sweep"] = sweep("llama-3.1-8b")
        write_json(args.output, result)
    result["elapsed_s"] = time.time() - started
    write_json(args.output, result)


if __name__ == "__main__":
    main()
