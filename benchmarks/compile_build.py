"""The ahead-of-time kernel build in one process against several: wall time and compiles, fresh folders.

    PYTHONPATH=. python3 benchmarks/compile_build.py [--model DIR] [--jobs 1 2 ...] [--output FILE]
        [-- ENGINE FLAGS]

Each run is `mopt compile-cache build --jobs N` (sm_90, no GPU needed) into an empty folder, then one
more with one process into the first run's full folder: the walk's own cost (every launch a cache
hit). Default model: benchmarks/configs/qwen3-0.6b, bf16. What the engine's compile-ahead workers do at
a cold GPU start (runtime/runner/compile_ahead.py), measured without the GPU.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from common import CONFIGS, RESULTS, environment, write_json

REPO = Path(__file__).resolve().parents[1]


def build(model: str, folder: Path, jobs: int, flags: list[str]) -> dict:
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    env["PYTHONPATH"] = str(REPO)
    command = [sys.executable, "-m", "model_optimizer.cli.main", "compile-cache", "build", "--model", model]
    command += [*flags, "--output", str(folder), "--jobs", str(jobs)]
    started = time.perf_counter()
    done = subprocess.run(command, env=env, capture_output=True, text=True, check=True)
    wall = time.perf_counter() - started
    report = json.loads(done.stdout.splitlines()[0])
    return {"jobs": jobs, "wall_s": round(wall, 2), **{k: report[k] for k in ("entries", "compiled", "seconds")}}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default=str(CONFIGS / "qwen3-0.6b"))
    parser.add_argument("--jobs", type=int, nargs="+", default=[1, os.cpu_count() or 1])
    parser.add_argument("--output", default=str(RESULTS / "compile_build_cpu.json"))
    parser.add_argument("flags", nargs="*", help="engine flags after --")
    args = parser.parse_args()
    flags = args.flags or ["--dtype", "bfloat16"]
    runs = []
    with tempfile.TemporaryDirectory(prefix="mopt-compile-build-") as tmp:
        for jobs in args.jobs:
            runs.append(build(args.model, Path(tmp) / f"jobs{jobs}", jobs, flags))
            print(json.dumps(runs[-1]), flush=True)
        walk = build(args.model, Path(tmp) / f"jobs{args.jobs[0]}", 1, flags) | {"folder": "full"}
        print(json.dumps(walk), flush=True)
    serial = next((r for r in runs if r["jobs"] == 1), None)
    payload = {
        "benchmark": "compile_build",
        "what": "mopt compile-cache build for sm_90 into a fresh folder per job count; then one process "
        "into a full folder (the walk alone); wall = process start to exit",
        "model": args.model,
        "flags": flags,
        "environment": environment(),
        "runs": runs,
        "walk_only": walk,
        "speedup_vs_one_process": {r["jobs"]: round(serial["wall_s"] / r["wall_s"], 2) for r in runs}
        if serial
        else None,
    }
    print(f"wrote {write_json(args.output, payload)}")


if __name__ == "__main__":
    main()
