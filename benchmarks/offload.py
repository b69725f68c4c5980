"""Weight offload: decode step time with N GiB of weights in host memory against its bound.

    PYTHONPATH=. python3 benchmarks/offload.py [--model llama-3.1-8b] [--offload-gb 8] [--output FILE]

For a config of benchmarks/configs (dummy bf16 weights, CUDA graphs on), batch 1 and 32 at context 512:
the median time between consecutive engine steps in steady decoding without offload, then with
`--offload-gb` GiB offloaded. The bound is what a step cannot beat if copies did not overlap compute:
the on-GPU step (the run without offload) plus offloaded bytes / host-to-device bandwidth, the
bandwidth measured in the same run (page-locked buffer, as the engine's). `vs_bound` below 1 means the
copies hid behind compute; the issue's target is at most 1.25. `overlap_floor_ms` (the larger of the two
parts) is what perfect overlap would give. Tokens per second at each batch are reported beside them.

A model that does not fit without offload (Llama-3.1-70B in bf16 on one H200: 131 GiB of weights) has
no plain run: with `--plain-layers A B` the on-GPU step is measured on two copies of the config cut to A
and B decoder layers and extrapolated linearly to the full depth (a decode step is a sum of identical
layers plus a fixed part: embedding, final norm, lm_head, sampling).

    PYTHONPATH=. python3 benchmarks/offload.py --model llama-3.1-70b --offload-gb 24 --batches 1 32 128 \
        --plain-layers 8 16 --gpu-memory-utilization 0.95
"""

from __future__ import annotations

import argparse
import gc
import json
import statistics
import tempfile
import time
from pathlib import Path

from common import CONFIGS, RESULTS, environment, write_json

CONTEXT = 512
DECODE_STEPS = 24


def h2d_gbps(num_bytes: int = 1 << 30, repeats: int = 10) -> float:
    """Host-to-device copy from page-locked memory registered as the engine registers it."""
    import torch

    host = torch.empty(num_bytes, dtype=torch.uint8)
    torch.cuda.cudart().cudaHostRegister(host.data_ptr(), num_bytes, 0)
    dev = torch.empty(num_bytes, dtype=torch.uint8, device="cuda")
    times = []
    for i in range(repeats + 2):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        dev.copy_(host, non_blocking=True)
        end.record()
        end.synchronize()
        if i >= 2:
            times.append(start.elapsed_time(end) / 1e3)
    torch.cuda.cudart().cudaHostUnregister(host.data_ptr())
    return num_bytes / statistics.median(times) / 1e9


def step_ms(llm, batch: int, tag: str) -> float:
    """Median time between engine steps once every request of `batch` decodes."""
    from model_optimizer import SamplingParams

    params = SamplingParams(temperature=0, ignore_eos=True, max_tokens=DECODE_STEPS, detokenize=False)
    engine = llm.engine
    for i in range(batch):
        engine.add_request(f"{tag}-{batch}-{i}", [(i * 7 + j) % 1000 + 1 for j in range(CONTEXT)], params)
    marks = []
    while engine.has_unfinished_requests():
        outs = engine.step()
        if len(outs) == batch and all(len(o.outputs[0].token_ids) > 2 for o in outs):
            marks.append(time.perf_counter())
    times = [b - a for a, b in zip(marks, marks[1:])]
    return statistics.median(times[1:]) * 1e3 if len(times) > 2 else float("nan")


def shallow_config(model: str, num_layers: int, folder: Path) -> Path:
    """benchmarks/configs/MODEL with only `num_layers` decoder layers, written under `folder`."""
    config = json.loads((CONFIGS / model / "config.json").read_text())
    config["num_hidden_layers"] = num_layers
    path = folder / f"{model}-{num_layers}-layers"
    path.mkdir()
    (path / "config.json").write_text(json.dumps(config))
    return path


def run(model_dir: Path, sizes: list[float], batches: list[int], utilization: float, save=lambda rows: None) -> dict:
    """One row per offloaded GiB in `sizes` (0.0: the plain run), keyed by str(GiB)."""
    import torch

    from model_optimizer import LLM

    kwargs = dict(load_format="dummy", dtype="bfloat16", max_model_len=CONTEXT + DECODE_STEPS + 8)
    kwargs |= dict(max_num_seqs=max(batches), gpu_memory_utilization=utilization)
    rows: dict[str, dict] = {}
    for gib in sizes:
        llm = LLM(str(model_dir), cpu_offload_gb=gib, **kwargs)
        offload = getattr(llm.runner.model, "weight_offload", None)
        rows[str(gib)] = {
            "cpu_offload_gb": gib,
            "offloaded_bytes": offload.host_bytes if offload else 0,
            "offloaded_layers": offload.layer_ids if offload else [],
            "slot_bytes": offload.device_bytes if offload else 0,
            "num_kv_blocks": llm.runner.num_kv_blocks,
            "ms_per_step": {b: step_ms(llm, b, f"{gib}") for b in batches},
        }
        print(f"offload {gib} GiB: {rows[str(gib)]['ms_per_step']}", flush=True)
        save(rows)  # a timeout later keeps what finished
        del llm, offload
        gc.collect()
        torch.cuda.empty_cache()
    return rows


def extrapolated_plain(model: str, layers: tuple[int, int], batches: list[int], utilization: float) -> dict:
    """The plain run's row for the full depth, from two shallow copies (module docstring)."""
    depth = json.loads((CONFIGS / model / "config.json").read_text())["num_hidden_layers"]
    a, b = layers
    with tempfile.TemporaryDirectory() as folder:
        shallow = {n: run(shallow_config(model, n, Path(folder)), [0.0], batches, utilization)["0.0"] for n in layers}
    per_layer = {x: (shallow[b]["ms_per_step"][x] - shallow[a]["ms_per_step"][x]) / (b - a) for x in batches}
    steps = {x: shallow[a]["ms_per_step"][x] + per_layer[x] * (depth - a) for x in batches}
    return {
        "cpu_offload_gb": 0.0,
        "extrapolated_from_layers": {n: shallow[n]["ms_per_step"] for n in layers},
        "ms_per_step": steps,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="llama-3.1-8b", help="a folder of benchmarks/configs")
    parser.add_argument("--offload-gb", type=float, default=8.0)
    parser.add_argument("--batches", type=int, nargs="+", default=[1, 32])
    parser.add_argument(
        "--plain-layers",
        type=int,
        nargs=2,
        metavar=("A", "B"),
        help="no plain run of the full model: extrapolate its step from A and B layers",
    )
    parser.add_argument("--gpu-memory-utilization", type=float, default=0.45)
    parser.add_argument("--output", default=str(RESULTS / "offload_h200.json"))
    args = parser.parse_args()
    bandwidth = h2d_gbps()
    print(f"host-to-device {bandwidth:.1f} GB/s", flush=True)
    doc = {"environment": environment(), "model": args.model, "context": CONTEXT, "h2d_gbps": bandwidth}
    util = args.gpu_memory_utilization
    rows: dict[str, dict] = {}
    if args.plain_layers:
        rows["0.0"] = extrapolated_plain(args.model, tuple(args.plain_layers), args.batches, util)
        print(f"plain (extrapolated): {rows['0.0']['ms_per_step']}", flush=True)
    sizes = [args.offload_gb] if args.plain_layers else [0.0, args.offload_gb]
    save = lambda done: write_json(args.output, doc | {"runs": rows | done})  # noqa: E731
    rows |= run(CONFIGS / args.model, sizes, args.batches, util, save)
    plain, offloaded = rows["0.0"], rows[str(args.offload_gb)]
    copy_ms = offloaded["offloaded_bytes"] / (bandwidth * 1e9) * 1e3
    results = []
    for b in args.batches:
        base, measured = plain["ms_per_step"][b], offloaded["ms_per_step"][b]
        results.append(
            {
                "batch": b,
                "ms_per_step_plain": base,
                "ms_per_step_offload": measured,
                "copy_ms": copy_ms,
                "bound_ms": base + copy_ms,
                "overlap_floor_ms": max(base, copy_ms),
                "vs_bound": measured / (base + copy_ms),
                "tokens_per_s_plain": b / base * 1e3,
                "tokens_per_s_offload": b / measured * 1e3,
            }
        )
        print(f"batch {b}: {measured:.1f} ms/step with offload, bound {base + copy_ms:.1f} ms", flush=True)
    write_json(args.output, doc | {"runs": rows, "results": results})
    print(f"wrote {args.output}")


if __name__ == "__main__":
    main()
