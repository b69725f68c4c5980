"""Shared by the benchmark scripts: machine and version facts, the copy-bandwidth ceiling, atomic JSON."""

from __future__ import annotations

import json
import os
import platform
import subprocess
import sys
import time
from pathlib import Path

CONFIGS = Path(__file__).parent / "configs"
RESULTS = Path(__file__).parent / "results"


def cpu_model() -> str | None:
    """The host CPU's name: host-bound figures (the step loop, grammar masks) move with it, and two runs on
    "the same" GPU machine have differed 2x in host time."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or None


def environment() -> dict:
    import torch

    info = {
        "time": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "python": sys.version.split()[0],
        "platform": platform.platform(),
        "cpu_count": os.cpu_count(),
        "cpu_model": cpu_model(),
        "load_average": [round(x, 2) for x in os.getloadavg()] if hasattr(os, "getloadavg") else None,
        "cpu_affinity": _cpu_list(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None,
        "torch": torch.__version__,
    }
    try:
        import triton

        info["triton"] = triton.__version__
    except ImportError:
        info["triton"] = None
    try:
        import transformers

        info["transformers"] = transformers.__version__
    except ImportError:
        pass
    if torch.cuda.is_available():
        props = torch.cuda.get_device_properties(0)
        info.update(
            gpu=props.name,
            gpu_memory_gib=round(props.total_memory / 2**30, 1),
            cuda=torch.version.cuda,
            sm_count=props.multi_processor_count,
            driver=_driver_version(),
        )
    return info


def _cpu_list(cpus: set[int]) -> str:
    """`{0, 1, 2, 5}` as "0-2,5": the cores this process may run on (taskset's form)."""
    runs: list[list[int]] = []
    for cpu in sorted(cpus):
        if runs and cpu == runs[-1][1] + 1:
            runs[-1][1] = cpu
        else:
            runs.append([cpu, cpu])
    return ",".join(f"{a}-{b}" if a != b else str(a) for a, b in runs)


def _driver_version() -> str | None:
    try:
        out = subprocess.run(
            ["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
            capture_output=True,
            text=True,
            timeout=20,
        )
        return out.stdout.strip() or None
    except (OSError, subprocess.TimeoutExpired):
        return None


def copy_bandwidth_gbps(num_bytes: int = 2 << 30, repeats: int = 20) -> float:
    """Device-to-device copy, counting bytes read plus bytes written (the ceiling for decode)."""
    import torch

    src = torch.empty(num_bytes // 2, dtype=torch.bfloat16, device="cuda").uniform_()
    dst = torch.empty_like(src)
    for _ in range(3):
        dst.copy_(src)
    times = []
    for _ in range(repeats):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        dst.copy_(src)
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) / 1e3)
    times.sort()
    return 2 * num_bytes / times[len(times) // 2] / 1e9


def write_json(path: str | Path, payload: dict) -> Path:
    """Write atomically: a crash never leaves half a result."""
    from model_optimizer.common.fileio import atomic_write

    atomic_write(path, json.dumps(payload, indent=2) + "\n")
    return Path(path)


def log_triton_compiles() -> list[tuple[float, str]]:
    """(time, kernel and specialization) of every Triton JIT compile from now on: compiles in a timed
    region are what makes a step slow once. Empty where this Triton has no compile hook."""
    import time

    compiles: list[tuple[float, str]] = []
    try:
        from triton import knobs
    except ImportError:
        return compiles

    def hook(*args, **kwargs) -> None:
        compiles.append((time.perf_counter(), str(kwargs.get("repr", ""))[:300]))

    knobs.runtime.jit_post_compile_hook = hook
    return compiles


def run_mopt_bench(argv: list[str], out_dir: Path) -> list[dict]:
    """`mopt bench ARGV --output-dir OUT_DIR` through its command entry point (its table kept off stdout);
    the run JSON files it wrote, in order. RuntimeError with its last output when it fails."""
    import contextlib
    import io

    from model_optimizer.cli.main import main as mopt

    argv = [*argv, "--output-dir", str(out_dir)]
    before = set(out_dir.glob("run-*.json")) if out_dir.exists() else set()
    with contextlib.redirect_stdout(io.StringIO()) as printed:
        code = mopt(argv)
    runs = sorted(set(out_dir.glob("run-*.json")) - before)
    if code not in (0, None) or not runs:
        raise RuntimeError(f"mopt {' '.join(argv)} exited with {code}:\n{printed.getvalue()[-3000:]}")
    return [json.loads(p.read_text()) for p in runs]
