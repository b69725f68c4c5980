"""How fast `mopt inspect` reads an 8B checkpoint, and (on a GPU) how close its memory plan comes to
the engine's KV allocation.

    PYTHONPATH=. python3 benchmarks/inspect_checkpoint.py [--output FILE]
    PYTHONPATH=. python3 benchmarks/inspect_checkpoint.py --memory-plan --output $OUT/inspect_memory_plan_h200.json

The first form builds a Llama-3.1-8B-shaped sharded safetensors set (four shards, 16 GB declared)
whose files hold real headers and a hole where the data would be (sparse: ~0 bytes on disk), then
times the inspection in-process (cold: first call with imports; warm: later calls) and as a
`mopt inspect --json` subprocess, with peak RSS. Inspect reads headers only, so the hole is never
touched. The second form (CUDA needed, about 3 minutes on an H200) starts the engine with dummy
weights for the Qwen3-0.6B and Llama-3.1-8B configs at two utilizations and compares its KV blocks
with the plan.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import struct
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from common import CONFIGS, RESULTS, environment, write_json

SHARD_BYTES = 5 * 10**9
DTYPE_CODES = {"torch.bfloat16": "BF16", "torch.float32": "F32", "torch.float16": "F16"}


def transformers_layout(config_dir: Path) -> list[tuple[str, str, list[int], int]]:
    """(name, dtype code, shape, bytes) of every tensor transformers saves for this config, from its
    model built on the meta device (no memory)."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    config = AutoConfig.from_pretrained(str(config_dir))
    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(config, dtype=torch.bfloat16)
    return [
        (name, DTYPE_CODES[str(t.dtype)], list(t.shape), t.numel() * t.element_size())
        for name, t in model.state_dict().items()
    ]


def write_sparse_checkpoint(config_dir: Path, out: Path) -> dict:
    """Sharded safetensors files with true headers and unwritten data, plus the index and config."""
    layout = transformers_layout(config_dir)
    shards: list[list[tuple[str, str, list[int], int]]] = [[]]
    size = 0
    for entry in layout:
        if shards[-1] and size + entry[3] > SHARD_BYTES:
            shards.append([])
            size = 0
        shards[-1].append(entry)
        size += entry[3]
    weight_map, total = {}, 0
    for i, shard in enumerate(shards):
        file = f"model-{i + 1:05d}-of-{len(shards):05d}.safetensors"
        header, offset = {"__metadata__": {"format": "pt"}}, 0
        for name, dtype, shape, nbytes in shard:
            header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [offset, offset + nbytes]}
            offset += nbytes
            weight_map[name] = file
        raw = json.dumps(header).encode()
        raw += b" " * (-len(raw) % 8)
        with (out / file).open("wb") as f:
            f.write(struct.pack("<Q", len(raw)) + raw)
            f.truncate(8 + len(raw) + offset)  # a hole: the declared data costs no disk
        total += offset
    (out / "model.safetensors.index.json").write_text(
        json.dumps({"metadata": {"total_size": total}, "weight_map": weight_map})
    )
    shutil.copy(config_dir / "config.json", out / "config.json")
    files = list(out.glob("*.safetensors"))
    return {
        "num_shards": len(shards),
        "num_tensors": len(layout),
        "declared_bytes": total,
        "apparent_bytes": sum(f.stat().st_size for f in files),
        "disk_bytes": sum(f.stat().st_blocks * 512 for f in files),
    }


def rss_mib() -> float:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return 0.0


def time_in_process(folder: Path, repeats: int) -> dict:
    """After `import torch` (paid by every torch program): the first call (model modules imported,
    the engine's model built), then fresh builds (the cached meta model dropped), then cached ones."""
    import torch  # noqa: F401

    before = rss_mib()
    start = time.perf_counter()
    from model_optimizer.model.inspect.consumption import _cached_meta_model
    from model_optimizer.model.inspect.inspector import inspect_checkpoint

    report = inspect_checkpoint(folder)
    first = time.perf_counter() - start
    after_first = rss_mib()
    fresh, cached = [], []
    for _ in range(repeats):
        _cached_meta_model.cache_clear()
        start = time.perf_counter()
        inspect_checkpoint(folder)
        fresh.append(time.perf_counter() - start)
    for _ in range(repeats):
        start = time.perf_counter()
        inspect_checkpoint(folder)
        cached.append(time.perf_counter() - start)
    return {
        "first_call_s": round(first, 4),
        "fresh_model_s_median": round(statistics.median(fresh), 4),
        "cached_model_s_median": round(statistics.median(cached), 4),
        "read_headers_s": report.timings_s["read_headers"],
        "rss_mib_after_import_torch": round(before, 1),
        "rss_mib_added_by_first_call": round(after_first - before, 1),
        "findings": sorted(f"{f.severity}:{f.id}" for f in report.findings if f.severity != "ok"),
        "census_params": report.census.total.params,
    }


HWM_WRAPPER = """
import sys
code = 0
try:
    exec(compile(sys.argv[1], "<bench>", "exec"))
except SystemExit as exc:
    code = exc.code or 0
for line in open("/proc/self/status"):
    if line.startswith("VmHWM:"):
        print("VmHWM", int(line.split()[1]), file=sys.stderr)
sys.exit(code)
"""


def time_subprocess(code: str, repeats: int) -> dict:
    """Wall time and peak RSS (VmHWM, read by the child itself: ru_maxrss would count the parent's
    pages copied at fork) of `python -c code`."""
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1])}
    walls, peaks, rc = [], [], None
    for _ in range(repeats):
        start = time.perf_counter()
        proc = subprocess.run([sys.executable, "-c", HWM_WRAPPER, code], capture_output=True, text=True, env=env)
        walls.append(time.perf_counter() - start)
        rc = proc.returncode
        peaks += [int(line.split()[1]) / 1024 for line in proc.stderr.splitlines() if line.startswith("VmHWM")]
    return {
        "code": code,
        "wall_s_median": round(statistics.median(walls), 3),
        "wall_s_min": round(min(walls), 3),
        "peak_rss_mib": round(max(peaks), 1) if peaks else None,
        "exit_code": rc,
    }


def run_speed(args: argparse.Namespace) -> dict:
    with tempfile.TemporaryDirectory(prefix="inspect-8b-") as tmp:
        folder = Path(tmp)
        checkpoint = write_sparse_checkpoint(CONFIGS / "llama-3.1-8b", folder)
        in_process = time_in_process(folder, args.repeats)
        cli = time_subprocess(
            f"from model_optimizer.cli.main import main; sys.exit(main(['inspect', {str(folder)!r}, '--json']))",
            args.repeats,
        )
        direct = time_subprocess(
            f"from model_optimizer.model.inspect.inspector import inspect_checkpoint; inspect_checkpoint({str(folder)!r})",
            args.repeats,
        )
        bare = time_subprocess("import torch", args.repeats)
    return {
        "benchmark": "inspect_checkpoint",
        "environment": environment(),
        "workload": {"model": "Llama-3.1-8B config, sparse sharded safetensors (headers only)", **checkpoint},
        "in_process": in_process,
        "subprocess_mopt_inspect": cli,
        "subprocess_inspect_checkpoint": direct,
        "subprocess_import_torch_only": bare,
        "note": "subprocess times are mostly the interpreter and `import torch` (subprocess_import_torch_only); "
        "`mopt` itself also imports every subcommand's parser (mopt embed's imports torch); "
        "the inspection proper is in_process.fresh_model_s_median",
    }


def run_memory_plan(args: argparse.Namespace) -> dict:
    from model_optimizer.model.inspect.plan_check import compare_with_engine

    cases = [
        ("qwen3-0.6b", 0.5, 4096),
        ("qwen3-0.6b", 0.9, 4096),
        ("llama-3.1-8b", 0.3, 8192),
        ("llama-3.1-8b", 0.9, 8192),
    ]
    results = []
    for name, utilization, max_model_len in cases:
        print(f"{name} at gpu_memory_utilization {utilization}...", file=sys.stderr, flush=True)
        result = compare_with_engine(CONFIGS / name, utilization, max_model_len)
        print(
            f"  planned {result['planned_blocks']}, measured {result['measured_blocks']} ({100 * result['relative_error']:+.3f}%)",
            file=sys.stderr,
            flush=True,
        )
        results.append(result)
    worst = max(abs(r["relative_error"]) for r in results)
    return {
        "benchmark": "inspect_memory_plan",
        "environment": environment(),
        "cases": results,
        "max_abs_relative_error": worst,
        "goal": 0.03,
        "within_goal": worst < 0.03,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument(
        "--memory-plan", action="store_true", help="compare the memory plan with the engine on this GPU"
    )
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--output", default=None)
    args = parser.parse_args()
    if args.memory_plan:
        payload = run_memory_plan(args)
        output = args.output or str(RESULTS / "inspect_memory_plan_h200.json")
    else:
        payload = run_speed(args)
        output = args.output or str(RESULTS / "inspect_checkpoint_cpu.json")
    write_json(output, payload)
    print(json.dumps({k: v for k, v in payload.items() if k != "environment"}, indent=1))


if __name__ == "__main__":
    main()
