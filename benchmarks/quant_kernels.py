"""Quantized linear kernels against bf16 F.linear at real model shapes (gpt-fast style: GB/s beside ms).

    PYTHONPATH=. python3 benchmarks/quant_kernels.py [--output FILE] [--sweep]

For each linear of one decoder layer of Qwen3-0.6B and Llama-3.1-8B (fused qkv, o, fused gate_up,
down) and M = 1, 2, 4, ... 256 rows, per method (bf16 `F.linear`; `fp8_linear`; `w8a16_linear`;
`w4a16_linear` at group 128 in the planes packing the layers hold; and `fp8_scaled_mm`, the W8A8
`torch._scaled_mm` path forced at every M, to show where the other kernels win): the GPU time of one call (`gpu_time.gpu_time_ms`: 20-64 back-to-back
calls captured in a CUDA graph and replayed, so a 5 us kernel measures 5 us and not its Python
launch; every call takes the next of several weight copies that together exceed the L2, so each
reads its weights from HBM), the weight bytes read per second and TFLOP/s. `per_step` sums one layer's four linears
times the number of layers: the linear work of one decode step at batch M, the first indicator for
the issue's targets (Llama-3.1-8B at batch 1: fp8 <= 2.5 ms, int4 <= 1.5 ms per step; bf16 4.76 ms).
`--sweep` first times every launch candidate (same GPU timing, after a check of its result) of
`quant_tiles.candidates` per format, shape and the row buckets of --m (each bucket timed at its own
row count: 1, 2, 4, ... 256, and 512 for "above 256" when asked): the CUDA-core GEMV (M = 1), the
tensor-core program's tiles, the dense matmul after one dequantization (128 rows and up), and for fp8
the W8A8 kinds (our e4m3 x e4m3 program, `_scaled_mm` above 16 rows; for int8 our int8 x int8 program,
`_int_mm` above 16 rows). It writes the fastest per case as a tile table (`--tiles-output`, default
beside --output; fp8 and int8 twice: "fp8" / "int8" the fastest weight-only launch, "fp8a" / "int8a"
the fastest of all, for callers that accept quantized activations; where the fastest
is the dense matmul after a dequantization, also the fastest launch a CUDA-graph capture can take,
in the table's "capture" entries; `--table-from` rewrites a table from an earlier run's rows): run with
MOPT_QUANT_TILES pointing at it, the
kernels take those shapes, here (the method timings that follow) and in the engine; committed as
model_optimizer/runtime/kernels/quant_tiles.json it becomes the default on that GPU. The Triton compiles of
the candidates run first in parallel processes (`--compile-workers`), which fill Triton's disk cache.

    PYTHONPATH=. python3 benchmarks/quant_kernels.py --sweep --tiles-output quant_tiles.json
"""

from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path

from common import CONFIGS, RESULTS, environment, write_json
from gpu_time import sets_for

M_VALUES = [1, 2, 4, 8, 16, 32, 64, 128, 256]
METHODS = ["bf16", "bf16_table", "fp8", "int8", "int8_w8a8", "int4", "fp8_scaled_mm"]
"""bf16_table: kernels/dense_linear.py, i.e. our program where the tile table measured it faster than cuBLAS;
int8_w8a8: int8 weights whose activations may be quantized per token (the table's "int8a" entries)."""
GROUP_SIZE = 128


def layer_shapes(model: str) -> dict[str, tuple[int, int]]:
    """(N, K) of one decoder layer's linears, from the model's config.json."""
    cfg = json.loads((CONFIGS / model / "config.json").read_text())
    hidden, heads, kv_heads = cfg["hidden_size"], cfg["num_attention_heads"], cfg["num_key_value_heads"]
    head_dim = cfg.get("head_dim") or hidden // heads
    inter = cfg["intermediate_size"]
    shapes = {"qkv_proj": ((heads + 2 * kv_heads) * head_dim, hidden), "o_proj": (hidden, heads * head_dim)}
    experts = cfg.get("num_experts") or cfg.get("num_local_experts")
    if experts:  # a mixture of experts: the router is a linear; the experts run in the fused MoE kernel
        shapes["router"] = (experts, hidden)
        if not cfg.get("mlp_only_layers"):
            return shapes  # every layer sparse: no dense MLP
    return shapes | {"gate_up_proj": (2 * inter, hidden), "down_proj": (hidden, inter)}


def make_weights(method: str, n: int, k: int, copies: int) -> list[tuple]:
    """`copies` independent weight sets of the method's layout (random, quantized on the GPU)."""
    import torch

    from model_optimizer.runtime.kernels.quant_reference import repack_int4
    from model_optimizer.runtime.layers.quantization.quantizers import quantize_fp8, quantize_int4, quantize_int8

    sets = []
    for i in range(copies):
        w = torch.randn(n, k, device="cuda", generator=torch.Generator("cuda").manual_seed(i)).bfloat16()
        if method in ("bf16", "bf16_table"):
            sets.append((w,))
        elif method in ("fp8", "fp8_scaled_mm"):
            sets.append(quantize_fp8(w).astuple())
        elif method in ("int8", "int8_w8a8"):
            sets.append(quantize_int8(w).astuple())
        else:  # the packing the layers hold on a GPU
            q, scales, zeros = quantize_int4(w, GROUP_SIZE).astuple()
            sets.append((repack_int4(q, "sequential", "planes"), scales, zeros))
        del w
    return sets


def call(method: str):
    """The function that runs `method` on (x, *weight_set)."""
    import torch.nn.functional as F

    from model_optimizer.runtime.kernels import quant_linear

    if method == "bf16":
        return lambda x, w: F.linear(x, w)
    if method == "bf16_table":
        from model_optimizer.runtime.kernels.dense_linear import dense_linear

        return lambda x, w: dense_linear(x, w)
    if method == "fp8":
        return quant_linear.fp8_linear
    if method == "fp8_scaled_mm":
        return lambda x, q, s: quant_linear._scaled_mm_w8a8(x, q, s, None)
    if method == "int8":
        return quant_linear.w8a16_linear
    if method == "int8_w8a8":
        return lambda x, q, s: quant_linear.w8a16_linear(x, q, s, dynamic_activations=True)
    return lambda x, q, s, z: quant_linear.w4a16_linear(x, q, s, z, GROUP_SIZE, packing="planes")


def time_ms(fn, x, sets: list[tuple], quick: bool = False) -> float:
    """GPU ms of one call fn(x, *set), each call on the next weight set (gpu_time.gpu_time_ms); `quick`:
    fewer replays (the sweep's thousands of candidates)."""
    from gpu_time import gpu_time_ms

    if quick:
        return gpu_time_ms(lambda weights: fn(x, *weights), sets, target_ms=4.0, samples=2)
    # the engine runs decode in CUDA graphs: a method that cannot be captured is an error, not a figure
    return gpu_time_ms(lambda weights: fn(x, *weights), sets, stream_fallback=False)


def bench_case(method: str, n: int, k: int, m_values: list[int]) -> list[dict]:
    import torch

    one = make_weights(method, n, k, 1)
    weight_bytes = sum(t.numel() * t.element_size() for t in one[0])
    sets = one + make_weights(method, n, k, sets_for(weight_bytes) - 1)
    fn = call(method)
    rows = []
    for m in m_values:
        if method == "fp8_scaled_mm" and torch.cuda.get_device_capability() < (8, 9):
            continue  # no fp8 tensor cores
        x = torch.randn(m, k, device="cuda").bfloat16()
        try:
            ms = time_ms(fn, x, sets)
        except Exception as exc:  # e.g. not capturable in a CUDA graph: reported, no figure
            rows.append({"method": method, "n": n, "k": k, "m": m, "error": str(exc)[:300]})
            continue
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
                r["ms"]
                for r in rows
                if r["method"] == method and r["m"] == m and (r["n"], r["k"]) in shapes.values() and "ms" in r
            ]
            if len(times) == len(shapes):
                out.append({"method": method, "m": m, "ms_per_step": sum(times) * num_layers})
    return out


SWEEP_KINDS = ("int4", "fp8", "int8", "bf16")
"""bf16: the unquantized weight through our program against cuBLAS (kernels/dense_linear.py), decode rows only."""
HBM_PEAK_GBPS = 4800  # H200; a candidate measured faster read (part of) its weights from L2


def sweep_rows(m_values: list[int]) -> dict[int, int]:
    """The row buckets that `m_values` fall in -> rows timed for each (the bucket's largest)."""
    from model_optimizer.runtime.kernels.quant_tiles import row_bucket

    return {row_bucket(m): row_bucket(m) for m in sorted(m_values)}


def sweep_cases(
    models: list[str],
    num_sms: int,
    m_values: list[int],
    kinds: tuple[str, ...] = SWEEP_KINDS,
    gluon: bool = False,
) -> list[tuple]:
    """(model, linear, kind, bucket, N, K, candidates) for every case the table holds: the row
    buckets of `m_values` (--m), each timed at its largest row count; fp8 and int8 with the W8A8 kinds too,
    int4 with the Gluon kernel's launch shapes where `gluon` (an sm_90 GPU)."""
    from model_optimizer.runtime.kernels.quant_tiles import candidates

    cases = []
    for model in models:
        for name, (n, k) in layer_shapes(model).items():
            for kind in kinds:
                for bucket, m in sweep_rows(m_values).items():
                    found = candidates(kind, m, n, k, num_sms, w8a8=True, gluon=gluon)
                    if len(found) > 1:  # bf16 above DENSE_MAX_ROWS: cuBLAS alone, nothing to choose
                        cases.append((model, name, kind, bucket, n, k, found))
    return cases


def _compile_worker(jobs: list[tuple]) -> list[str]:
    """Launch each (kind, m, n, k, tiles) once on uninitialised tensors: the compile lands in Triton's
    disk cache with the specializations of the real call (strides, one split or several)."""
    import torch

    from model_optimizer.runtime.kernels import quant_matmul as qk

    errors = []
    for kind, m, n, k, tiles in jobs:
        try:
            weight = (
                torch.zeros(n, k // 8, dtype=torch.int32, device="cuda")
                if kind == "int4"
                else torch.zeros(n, k, dtype=torch.bfloat16 if kind == "bf16" else torch.int8, device="cuda")
            )
            if kind == "fp8":
                weight = weight.view(torch.float8_e4m3fn)
            scales = torch.ones(n, k // GROUP_SIZE if kind == "int4" else 1, device="cuda", dtype=torch.bfloat16)
            scales = scales if kind == "int4" else (None if kind == "bf16" else scales[:, 0].float().contiguous())
            zeros = torch.zeros(n, k // GROUP_SIZE, dtype=torch.uint8, device="cuda") if kind == "int4" else None
            x = torch.zeros(m, k, device="cuda", dtype=torch.bfloat16)
            qk.quant_matmul(x, weight, scales, zeros, kind, GROUP_SIZE, None, tiles)
        except Exception as exc:  # reported; the timing pass records the failure per candidate
            errors.append(f"{kind} {m}x{n}x{k} {tiles}: {str(exc)[:160]}")
    torch.cuda.synchronize()
    return errors


def compile_in_parallel(cases: list, workers: int) -> list[str]:
    """Every Triton candidate of `cases` compiled once, spread over `workers` spawned processes."""
    import concurrent.futures
    import multiprocessing

    jobs = {}
    for _model, _name, kind, bucket, n, k, found in cases:
        for tiles in found:
            if tiles.backend != "triton":
                continue
            # what Triton specializes on: integers equal to 1 or divisible by 16 (N, K, strides; not M)
            ints = (n, k, k // 8, k // GROUP_SIZE) if kind == "int4" else (n, k)
            even = (n % tiles.block_n == 0, k % tiles.block_k == 0)  # EVEN_N, EVEN_K
            key = (kind, *tiles.compile_key, tiles.split_k == 1, *even)
            key += tuple((i == 1, i % 16 == 0) for i in ints)
            jobs.setdefault(key, (kind, bucket, n, k, tiles))
    jobs = list(jobs.values())
    print(f"sweep: {len(jobs)} distinct compiles on {workers} processes", flush=True)
    if workers <= 1 or not jobs:
        return _compile_worker(jobs)
    chunks = [jobs[i::workers] for i in range(workers)]
    ctx = multiprocessing.get_context("spawn")
    with concurrent.futures.ProcessPoolExecutor(workers, mp_context=ctx) as pool:
        return [e for errors in pool.map(_compile_worker, chunks) for e in errors]


def _runner(kind: str, tiles):
    from model_optimizer.runtime.kernels import quant_linear
    from model_optimizer.runtime.kernels import quant_matmul as qk

    if tiles.backend == "scaled_mm":
        return lambda x, q, s, z: quant_linear._scaled_mm_w8a8(x, q, s, None)
    if tiles.backend == "int_mm":
        return lambda x, q, s, z: qk.int_mm_w8a8(x, q, s, None)
    if tiles.backend == "gluon":  # int4 on sm_90 (kernels/int4_gluon.py)
        import torch

        from model_optimizer.runtime.kernels.int4_gluon import int4_gluon_matmul

        return lambda x, q, s, z: int4_gluon_matmul(
            x, q.view(torch.int16), s, z, tiles.block_n, tiles.block_m, tiles.num_warps, tiles.num_stages, tiles.split_k
        )
    if tiles.backend == "torch":  # bf16 weights: cuBLAS
        return lambda x, q, s, z: x @ q.T
    if tiles.backend == "dequant":  # the engine's path: the scratch buffer, then a dense matmul

        def dense(x, q, s, z):
            buf = quant_linear._weight_scratch(x.device, x.dtype, s.shape[0] * x.shape[1])
            w = qk.dequantize_weight(q, s, z, kind, GROUP_SIZE, x.dtype, buf)
            return x @ w.T

        return dense
    return lambda x, q, s, z: qk.quant_matmul(x, q, s, z, kind, GROUP_SIZE, None, tiles)


def _dequantized(kind: str, weight_set: tuple):
    """float32 (N, K) weight of one set, the yardstick of every candidate's output."""
    import torch

    from model_optimizer.runtime.kernels import quant_reference as ref

    if kind == "int4":
        return ref.dequantize_int4(weight_set[0], weight_set[1], weight_set[2], GROUP_SIZE, torch.float32, "planes")
    if kind == "int8":
        return ref.dequantize_int8(weight_set[0], weight_set[1])
    if kind == "bf16":
        return weight_set[0].float()
    return ref.dequantize_fp8(weight_set[0], weight_set[1])


def _best(rows: list[dict], kinds: tuple[str, ...]) -> dict | None:
    timed = [r for r in rows if "ms" in r and r["kernel"] in kinds]
    return min(timed, key=lambda r: r["ms"]) if timed else None


WEIGHT_ONLY = ("gemv", "mma", "dequant", "torch")
"""Kernels that keep the activations exact: a "fp8" or "int8" table entry is the fastest of these."""
ALL_KERNELS = WEIGHT_ONLY + ("w8a8", "scaled_mm", "int_mm")
"""Every kernel: a "fp8a" or "int8a" entry is the fastest of these (quantized activations accepted)."""


def record_winners(case_rows: list[dict], kind: str, m: int, n: int, k: int, tables: dict) -> None:
    """The fastest candidate of one case into tables["entries"] (per table kind: `kind`, and "fp8a" /
    "int8a" for fp8 / int8), with its us into tables["us"]; where it is "dequant" (a capture cannot grow its scratch
    buffer), the fastest other one into tables["capture"] / ["capture_us"]: what a CUDA-graph capture
    takes there."""
    from model_optimizer.runtime.kernels import quant_tiles

    for table_kind, kinds in ((kind, WEIGHT_ONLY), (quant_tiles.ANY_KINDS.get(kind), ALL_KERNELS)):
        if table_kind is None:
            continue
        winner = _best(case_rows, kinds)
        if winner is None:
            continue
        key = quant_tiles.table_key(table_kind, m, n, k)
        tables["entries"][key] = quant_tiles.QuantTiles(**winner["tiles"])
        tables["us"][key] = winner["ms"] * 1e3
        if winner["kernel"] == "dequant":
            safe = _best(case_rows, tuple(name for name in kinds if name != "dequant"))
            if safe is not None:
                tables["capture"][key] = quant_tiles.QuantTiles(**safe["tiles"])
                tables["capture_us"][key] = safe["ms"] * 1e3


def tables_json(gpu: str, tables: dict) -> dict:
    from model_optimizer.runtime.kernels import quant_tiles

    return quant_tiles.table_json(gpu, tables["entries"], tables["us"], tables["capture"], tables["capture_us"])


def merge_tables(path: Path, table: dict) -> None:
    """`table`'s entries (and timings) written over those of the table at `path`, the others kept:
    a sweep of new shapes or kinds adds to the packaged table instead of replacing it."""
    from model_optimizer.common.fileio import atomic_write

    old = json.loads(path.read_text()) if path.exists() else {"gpu": table["gpu"]}
    if old["gpu"] != table["gpu"]:
        raise ValueError(f"{path} is a table for {old['gpu']}, the sweep ran on {table['gpu']}")
    merged = dict(table)
    if old.get("also"):  # the GPUs and formats a decode A/B found the table faster on: kept, to be measured
        merged["also"] = old["also"]  # again there after a re-sweep (scripts/device/table_elsewhere.sh)
    for part in ("entries", "us", "capture", "capture_us"):
        merged[part] = dict(sorted((old.get(part, {}) | table.get(part, {})).items()))
    for key in [k for k, entry in merged["entries"].items() if entry["backend"] != "dequant"]:
        merged["capture"].pop(key, None)  # an old "dequant" entry measured again as another launch
        merged["capture_us"].pop(key, None)
    atomic_write(path, json.dumps(merged, indent=1) + "\n")


def table_from_sweep(path: Path) -> dict:
    """The tile table of an earlier run's sweep rows (its --output JSON), as the sweep writes it now."""
    result = json.loads(Path(path).read_text())
    tables = {"entries": {}, "us": {}, "capture": {}, "capture_us": {}}
    cases: dict[tuple, list[dict]] = {}
    for row in result["sweep"]:
        cases.setdefault((row["kind"], row["m"], row["n"], row["k"]), []).append(row)
    for (kind, m, n, k), case_rows in cases.items():
        record_winners(case_rows, kind, m, n, k, tables)
    return tables_json(result["environment"]["gpu"], tables)


def time_candidates(x, kind: str, found: list, sets: list, want, weight_bytes: int) -> list[dict]:
    """One row per candidate: its check against the dequantized product, then its GPU time."""
    rows = []
    for tiles in found:
        row = {"tiles": vars(tiles), "kernel": tiles.kernel}
        try:
            out = _runner(kind, tiles)(x, *sets[0]).float()
            row["rel_err"] = ((out - want).norm() / want.norm()).item()
            # weight-only: one bf16 rounding (~4e-3); W8A8 also rounds x to e4m3 (~3%)
            if not row["rel_err"] < (6e-2 if tiles.quantizes_activations else 1e-2):
                raise ValueError(f"wrong result: relative error {row['rel_err']:.3g}")
            row["ms"] = time_ms(_runner(kind, tiles), x, sets, quick=True)
            row["weight_gbps"] = weight_bytes / row["ms"] / 1e6
            if row["weight_gbps"] > HBM_PEAK_GBPS:  # faster than HBM: the weights came from L2
                row["suspect"] = "above HBM peak"
        except Exception as exc:  # a launch shape the compiler rejects is a result too
            row["error"] = str(exc)[:200]
        rows.append(row)
    return rows


def sweep(
    models: list[str], workers: int, m_values: list[int], tiles_path: Path, kinds: tuple[str, ...] = SWEEP_KINDS
) -> tuple[list[dict], dict, list[str]]:
    """Time every candidate per case: (rows, table JSON, compile errors). The table so far is rewritten
    at `tiles_path` after each weight shape, so a run cut by its time limit still leaves the shapes it
    finished."""
    import torch

    from model_optimizer.common.fileio import atomic_write
    from model_optimizer.runtime.kernels import quant_tiles
    from model_optimizer.runtime.kernels.quant_matmul import _device_facts

    gpu, num_sms = _device_facts(0)
    cases = sweep_cases(models, num_sms, m_values, kinds, gluon=torch.cuda.get_device_capability(0) == (9, 0))
    t0 = time.time()
    errors = compile_in_parallel(cases, workers)
    print(f"sweep: compiled the candidates in {time.time() - t0:.0f} s ({len(errors)} failed)", flush=True)
    rows, tables = [], {"entries": {}, "us": {}, "capture": {}, "capture_us": {}}
    by_weights: dict[tuple, list] = {}
    for case in cases:
        by_weights.setdefault((case[2], case[4], case[5]), []).append(case)
    for (kind, n, k), group in by_weights.items():
        one = make_weights(kind, n, k, 1)
        weight_bytes = sum(t.numel() * t.element_size() for t in one[0])
        more = make_weights(kind, n, k, sets_for(weight_bytes) - 1)  # together beyond the L2
        sets = [(w[0], w[1] if len(w) > 1 else None, w[2] if kind == "int4" else None) for w in one + more]
        dequantized = _dequantized(kind, sets[0])
        for model, name, _kind, bucket, _n, _k, found in group:
            m = bucket
            x = torch.randn(m, k, device="cuda").bfloat16()
            want = x.float() @ dequantized.T
            default = quant_tiles.default_tiles(kind, m, n, k, num_sms)
            case_rows = time_candidates(x, kind, found, sets, want, weight_bytes)
            for row in case_rows:
                row.update(model=model, linear=name, kind=kind, n=n, k=k, m=m, bucket=bucket)
                row["default"] = row["tiles"] == vars(default)
            rows += case_rows
            record_winners(case_rows, kind, m, n, k, tables)
            won = _best(case_rows, ALL_KERNELS)
            default_ms = next((r["ms"] for r in case_rows if r["default"] and "ms" in r), None)
            if won:
                print(
                    f"sweep {model} {name:12s} {kind} M={m:3d}: best {won['ms'] * 1e3:6.1f} us "
                    f"{weight_bytes / won['ms'] / 1e6:5.0f} GB/s {won['kernel']} {won['tiles']}; default "
                    + (f"{default_ms * 1e3:.1f} us" if default_ms else "-"),
                    flush=True,
                )
        del sets, dequantized
        torch.cuda.empty_cache()
        atomic_write(tiles_path, json.dumps(tables_json(gpu, tables), indent=1) + "\n")
    return rows, tables_json(gpu, tables), errors


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--models", nargs="+", default=["llama-3.1-8b", "qwen3-0.6b"])
    parser.add_argument("--methods", nargs="+", default=METHODS, choices=METHODS)
    parser.add_argument("--m", nargs="+", type=int, default=M_VALUES)
    parser.add_argument("--sweep", action="store_true", help="time every launch candidate first; write the table")
    parser.add_argument("--tiles-output", default=None, help="tile table of the sweep (default: beside --output)")
    parser.add_argument(
        "--kinds", nargs="+", default=list(SWEEP_KINDS), choices=SWEEP_KINDS, help="kinds the sweep times"
    )
    parser.add_argument(
        "--merge-into", default=None, help="also merge the sweep's entries into this table (e.g. the packaged one)"
    )
    parser.add_argument("--compile-workers", type=int, default=min(12, os.cpu_count() or 1))
    parser.add_argument("--output", default=str(RESULTS / "quant_kernels_h200.json"))
    parser.add_argument(
        "--table-from",
        default=None,
        help="only rewrite the tile table (--tiles-output) from the sweep rows of an earlier --output JSON",
    )
    args = parser.parse_args()
    if args.table_from:
        table = table_from_sweep(Path(args.table_from))
        Path(args.tiles_output or "quant_tiles.json").write_text(json.dumps(table, indent=1) + "\n")
        print(f"{len(table['entries'])} entries, {len(table.get('capture', {}))} capture entries")
        return
    result = {
        "benchmark": "quant_kernels",
        "environment": environment(),
        "config": vars(args),
        "rows": [],
        "per_step": {},
    }
    started = time.time()
    if args.sweep:
        from model_optimizer.common.fileio import atomic_write
        from model_optimizer.runtime.kernels import quant_tiles

        tiles_path = Path(args.tiles_output or Path(args.output).with_name("quant_tiles.json"))
        rows, table, errors = sweep(args.models, args.compile_workers, args.m, tiles_path, tuple(args.kinds))
        result.update(sweep=rows, compile_errors=errors, sweep_s=time.time() - started)
        atomic_write(tiles_path, json.dumps(table, indent=1) + "\n")
        if args.merge_into:
            merge_tables(Path(args.merge_into), table)
        os.environ[quant_tiles.TABLE_ENV] = str(tiles_path)  # the timings below run the tuned shapes
        quant_tiles._table_for.cache_clear()
        write_json(args.output, result)
        print(f"sweep: {len(table['entries'])} table entries in {tiles_path} after {time.time() - started:.0f} s")
    for model in args.models:
        cfg = json.loads((CONFIGS / model / "config.json").read_text())
        shapes = layer_shapes(model)
        for method in args.methods:
            for name, (n, k) in shapes.items():
                rows = bench_case(method, n, k, args.m)
                for row in rows:
                    row.update(model=model, linear=name)
                    if "error" in row:
                        print(f"{model} {name:12s} {method:13s} M={row['m']:4d} ERROR {row['error']}", flush=True)
                        continue
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
    result["elapsed_s"] = time.time() - started
    write_json(args.output, result)


if __name__ == "__main__":
    main()
