"""GPU half of benchmarks/int4_stream_decode.py: the balanced int4 launch timed and checked at real shapes.

`time_all`: for Llama-3.1-8B's and Qwen3-0.6B's four linears at 1, 8 and 16 rows, the engine's own int4
launch (`quant_linear.w4a16_linear`, which runs the tile table's launch for the shape: our Triton program,
its GEMV, or Gluon where the table names it) and every variant of the balanced launch at each program
count that fits the SMs at once, each first checked against the dequantizing reference, then timed from
CUDA-graph replays over weight sets rotated past the L2 (gpu_time). The JSON holds us per call, TB/s of
the weight bytes (packed codes, scales and zero points), the best launch per shape against the table's,
and per model and row count the sum over a decoder step's linears.

`check_all`: no timing; every variant and program count at every shape and 1, 3 and 16 rows against the
reference, twice (the same bits: the fixed-order sum, the counters reset), and replayed twice from a
CUDA graph (the same bits again), with the per-tile counters zero after each.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
from collections.abc import Callable

import torch
from gpu_time import gpu_time_ms, sets_for
from int4_stream_decode import (
    PROGRAMS_PER_SM,
    VARIANTS,
    StreamVariant,
    _counters,
    compile_facts,
    launch,
    programs_that_fit,
    table_facts,
    table_tiles,
)

from model_optimizer.common.fileio import atomic_write
from model_optimizer.runtime.kernels.quant_linear import w4a16_linear
from model_optimizer.runtime.kernels.quant_matmul import device_tiles
from model_optimizer.runtime.kernels.quant_reference import pack_int4_planes, w4a16_linear_ref

SHAPES = {
    "llama-3.1-8b": {"qkv": (6144, 4096), "o": (4096, 4096), "gate_up": (28672, 4096), "down": (4096, 14336)},
    "qwen3-0.6b": {"qkv": (4096, 1024), "o": (1024, 2048), "gate_up": (6144, 1024), "down": (1024, 3072)},
}
"""(N, K) of each model's linears, as its decoder layers run them (fused qkv and gate_up)."""
LAYERS = {"llama-3.1-8b": 32, "qwen3-0.6b": 28}
GROUP = 128
TOLERANCE = 1e-2
"""||out - ref|| / ||ref|| allowed against the bf16 reference (tests/gpu/test_quant_kernels_gpu.py's)."""

WeightSet = tuple[torch.Tensor, torch.Tensor, torch.Tensor]
"""(planes int32 (N, K // 8), bf16 scales (N, K // G), uint8 zero points (N, K // G))."""


def weight_sets(n: int, k: int, count: int) -> list[WeightSet]:
    """`count` random int4 weights of (N, K) in the planes packing, on the GPU."""
    sets = []
    for _ in range(count):
        q = torch.randint(0, 16, (n, k), dtype=torch.int32, device="cuda")
        scales = (torch.rand(n, k // GROUP, device="cuda") * 0.02 + 0.001).to(torch.bfloat16)
        zeros = torch.randint(0, 16, (n, k // GROUP), dtype=torch.uint8, device="cuda")
        sets.append((pack_int4_planes(q), scales, zeros))
    return sets


def weight_bytes(n: int, k: int) -> int:
    """Bytes a call reads from HBM for its weight: packed codes, bf16 scales and uint8 zero points."""
    return n * k // 2 + n * (k // GROUP) * 3


def relative_error(out: torch.Tensor, ref: torch.Tensor) -> float:
    return ((out.double() - ref.double()).norm() / ref.double().norm().clamp_min(1e-30)).item()


def counters_zero() -> bool:
    torch.cuda.synchronize()
    return not any(c.any() for c in _counters.by_device.values())


def program_counts(variant: StreamVariant, kernel: object, num_sms: int, n: int, k: int) -> dict[str, int]:
    """Launch label -> programs: PROGRAMS_PER_SM x the SMs where that many fit the SMs at once with this compiled
    kernel, and the most that fit ("p3": 3 an SM); a count past the work units is one program a unit ("units")."""
    fit = programs_that_fit(kernel.n_regs, kernel.metadata.shared, variant.num_warps)
    units = (n // variant.block_n) * (k // 128)
    counts: dict[str, int] = {}
    for per_sm in dict.fromkeys([p for p in PROGRAMS_PER_SM if p <= fit] + [fit]):
        if per_sm and min(per_sm * num_sms, units) not in counts.values():
            counts[f"p{per_sm}" if per_sm * num_sms < units else "units"] = min(per_sm * num_sms, units)
    return counts


def _timed(call: Callable[[WeightSet], torch.Tensor], sets: list[WeightSet], nbytes: int) -> dict:
    us = 1000 * gpu_time_ms(call, sets, stream_fallback=False)
    return {"us": round(us, 2), "tbs": round(nbytes / us / 1e6, 3)}


def _time_variant(row: dict, x: torch.Tensor, sets: list[WeightSet], ref: torch.Tensor, variant: StreamVariant,
                  num_sms: int) -> None:  # fmt: skip
    """Into `row`: the variant as compiled for this shape, and at each program count that fits, its GPU time
    (or why it was left out: a wrong result, counters left non-zero)."""
    kernel = launch(x, *sets[0], GROUP, variant, 2 * num_sms)[1]
    row["compiled"][variant.name] = {"registers": kernel.n_regs, "spills": kernel.n_spills,
                                     "shared_bytes": kernel.metadata.shared}  # fmt: skip
    for label, programs in program_counts(variant, kernel, num_sms, row["n"], row["k"]).items():
        name = f"{variant.name}/{label}"
        call = lambda s, p=programs: launch(x, *s, GROUP, variant, p)[0]
        error = relative_error(call(sets[0]), ref)
        if error > TOLERANCE or not counters_zero():
            row["errors"][name] = f"relative error {error:.3g}, counters zero: {counters_zero()}"
            continue
        row["variants"][name] = _timed(call, sets, weight_bytes(row["n"], row["k"]))


def time_row(model: str, linear: str, sets: list[WeightSet], m: int, num_sms: int) -> dict:
    """The table's launch and every balanced one at m rows of one linear (wrong or failing ones under errors)."""
    n, k = SHAPES[model][linear]
    x = torch.randn(m, k, dtype=torch.bfloat16, device="cuda")
    ref = w4a16_linear_ref(x, *sets[0], GROUP, packing="planes")
    row = {"model": model, "linear": linear, "n": n, "k": k, "m": m, "variants": {}, "errors": {}, "compiled": {}}
    packaged = lambda s: w4a16_linear(x, *s, GROUP, packing="planes")  # the engine's call for an int4 layer
    tiles = device_tiles(x, n, "int4", GROUP)
    row["table"] = {"tiles": dataclasses.asdict(tiles), "kernel": tiles.kernel,
                    "error": relative_error(packaged(sets[0]), ref), **_timed(packaged, sets, weight_bytes(n, k))}  # fmt: skip
    for variant in VARIANTS:
        try:
            _time_variant(row, x, sets, ref, variant, num_sms)
        except Exception as exc:  # a launch this GPU refuses (resources) is a result too
            row["errors"][variant.name] = f"{type(exc).__name__}: {str(exc)[-300:]}"
    best = min(row["variants"].items(), key=lambda item: item[1]["us"], default=(None, {}))
    row["best"] = {"launch": best[0], **best[1]}
    if best[0]:
        row["best"]["speedup"] = round(row["table"]["us"] / best[1]["us"], 3)
    return row


def step_sums(rows: list[dict]) -> dict:
    """Per model and row count, the linears of one decoder step (x layers) in ms: the table's launches, the
    faster of the table's and the best balanced launch per shape (a table that could also pick the balanced
    launch), and the best single balanced launch (one variant and program count for every shape)."""
    sums: dict[str, dict] = {}
    for model, layers in LAYERS.items():
        for m in sorted({r["m"] for r in rows if r["model"] == model}):
            group = [r for r in rows if r["model"] == model and r["m"] == m]
            if len(group) < len(SHAPES[model]):
                continue
            common = set.intersection(*(set(r["variants"]) for r in group))
            totals = {name: sum(r["variants"][name]["us"] for r in group) for name in common}
            single = min(totals.items(), key=lambda item: item[1], default=(None, None))
            sums.setdefault(model, {})[str(m)] = {
                "table_ms": round(layers * sum(r["table"]["us"] for r in group) / 1000, 3),
                "with_balanced_ms": round(layers * sum(min(r["table"]["us"], r["best"].get("us", 1e9)) for r in group) / 1000, 3),
                "best_single_launch": single[0],
                "best_single_ms": round(layers * single[1] / 1000, 3) if single[1] else None,
            }  # fmt: skip
    return sums


def time_all(output: str, rows: list[int] | None = None) -> None:
    """Every shape at every row count (default 1, 8, 16); the JSON rewritten after each row."""
    torch.manual_seed(0)
    props = torch.cuda.get_device_properties(0)
    results: list[dict] = []
    for model, linears in SHAPES.items():
        for linear, (n, k) in linears.items():
            sets = weight_sets(n, k, sets_for(weight_bytes(n, k)))
            for m in rows or (1, 8, 16):
                row = time_row(model, linear, sets, m, props.multi_processor_count)
                results.append(row)
                best = row["best"]
                print(f"{model:13s} {linear:8s} m{m:<3d} table {row['table']['us']:7.2f} us "
                      f"({row['table']['tbs']:.2f} TB/s)  best {best.get('launch')} {best.get('us')} us "
                      f"({best.get('tbs')} TB/s) x{best.get('speedup')}  errors {len(row['errors'])}", flush=True)  # fmt: skip
                atomic_write(output, json.dumps({"gpu": props.name, "num_sms": props.multi_processor_count,
                                                 "rows": results, "step_sums": step_sums(results)}, indent=1))  # fmt: skip
            del sets
    for model, by_rows in step_sums(results).items():  # the summary a device script's log ends with
        for m, sums in by_rows.items():
            print(f"{model} m{m}: linears of a step {sums['table_ms']} ms (table), {sums['with_balanced_ms']} ms "
                  f"(balanced where faster), {sums['best_single_ms']} ms ({sums['best_single_launch']} everywhere)")  # fmt: skip


def check_launch(x: torch.Tensor, weights: WeightSet, ref: torch.Tensor, variant: StreamVariant, programs: int) -> str:
    """ "" if one balanced launch is right (error, a repeat's bits, two graph replays' bits, counters), else why not."""
    first = launch(x, *weights, GROUP, variant, programs)[0]
    error = relative_error(first, ref)
    if error > TOLERANCE:
        return f"relative error {error:.3g}"
    if not torch.equal(first, launch(x, *weights, GROUP, variant, programs)[0]) or not counters_zero():
        return "a second launch differs or left counters non-zero"
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        captured = launch(x, *weights, GROUP, variant, programs)[0]
    for _ in range(2):
        captured.zero_()
        graph.replay()
        if not torch.equal(first, captured) or not counters_zero():
            return "a CUDA-graph replay differs or left counters non-zero"
    return ""


def _check_shape(n: int, k: int, rows: list[int], num_sms: int) -> tuple[int, list[str]]:
    """(launches checked, failures) of every variant and program count at N x K and each row count."""
    weights = weight_sets(n, k, 1)[0]
    checked, failures = 0, []
    for m in rows:
        x = torch.randn(m, k, dtype=torch.bfloat16, device="cuda")
        ref = w4a16_linear_ref(x, *weights, GROUP, packing="planes")
        for variant in VARIANTS:
            kernel = launch(x, *weights, GROUP, variant, num_sms)[1]
            counts = program_counts(variant, kernel, num_sms, n, k)
            for programs in [*counts.values(), 7, num_sms + 1]:  # odd shares too
                try:
                    why = check_launch(x, weights, ref, variant, programs)
                except Exception as exc:  # a launch or capture that fails is a failure, not the end
                    why = f"{type(exc).__name__}: {str(exc)[-300:]}"
                checked += 1
                if why:
                    failures.append(f"{n}x{k} m{m} {variant.name} {programs} programs: {why}")
                    print(failures[-1], flush=True)
    return checked, failures


def check_all(output: str, rows: list[int] | None = None) -> None:
    """Every variant and program count at every shape and row count (default 1, 3, 16); raises SystemExit(1)
    after writing the failures when any."""
    torch.manual_seed(1)
    num_sms = torch.cuda.get_device_properties(0).multi_processor_count
    checked, failures = 0, []
    for linears in SHAPES.values():
        for n, k in linears.values():
            shape_checked, shape_failures = _check_shape(n, k, rows or [1, 3, 16], num_sms)
            checked, failures = checked + shape_checked, failures + shape_failures
    atomic_write(output, json.dumps({"checked": checked, "failures": failures}, indent=1))
    print(f"{checked} launches checked, {len(failures)} failures")
    if failures:
        raise SystemExit(1)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--compile-only", action="store_true", help="compile every variant for sm_90 (no GPU)")
    parser.add_argument("--check", action="store_true", help="GPU: correctness of every variant, no timing")
    parser.add_argument("--output", help="the JSON of the GPU run (required then)")
    parser.add_argument("--rows", type=int, nargs="+", help="row counts (default 1 8 16 timed, 1 3 16 checked)")
    args = parser.parse_args()
    if args.compile_only:
        for variant in VARIANTS:
            print(f"{variant.name:12s} {json.dumps(compile_facts(variant))}", flush=True)
        for tiles in table_tiles():  # what the balanced variants are up against
            facts = table_facts(tiles)
            print(f"table {tiles.block_n}x{tiles.block_m} w{tiles.num_warps} a{tiles.accumulators} "
                  f"s{tiles.num_stages} {json.dumps(facts)}", flush=True)  # fmt: skip
        return
    if not args.output:
        parser.error("--output is required unless --compile-only")
    (check_all if args.check else time_all)(args.output, args.rows)


if __name__ == "__main__":
    main()
