"""What this CPU runs fastest: float32 or bfloat16 matmuls, and on how many intra-op threads.

CPUs differ more than GPUs here. One with AMX or AVX512-BF16 multiplies bf16 natively; one with only
AVX2 converts every bf16 element and runs several times slower than in float32. And more intra-op
threads than there are idle cores make every small matmul wait for its slowest thread: on a shared
2-core machine a decode step slows by an order of magnitude. Neither is visible from the CPU flags
alone (a VM may hide them, a neighbour may hold a core), so mopt measures it: a decode-shaped and a
prefill-shaped matmul, about a second, once, cached in the user's cache folder under the CPU model,
the cores this process may use and the torch version. `--dtype auto` on the CPU
(runtime/models/loader.py `resolve_dtype`), the engine's thread count and `mopt doctor` all read it.

OMP_NUM_THREADS, when set, is the user's word on threads and is never measured over.
"""

from __future__ import annotations

import json
import logging
import os
import platform
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

from model_optimizer.common.fileio import atomic_write, user_cache_dir
from model_optimizer.common.processes import usable_cores

log = logging.getLogger(__name__)

CACHE_FILE = "cpu_speed.json"
SCHEMA = 2
HIDDEN = 1024
"""Width of the measured matmul (a 1024 x 1024 weight: 4 MiB in float32, more than L2, as in a real layer)."""
DECODE_ROWS = 8
PREFILL_ROWS = 256
DECODE_STEPS = 32
"""The timed work: one prefill chunk of PREFILL_ROWS tokens and DECODE_STEPS decode steps of DECODE_ROWS
sequences, the mix of a request whose answer is about as long as its prompt."""
REPEATS = 3
BF16_MARGIN = 0.9
"""bfloat16 must take at most this share of float32's time to be chosen: float32 is the safer numerics."""
THREAD_MARGIN = 0.9
"""More threads must take at most this share of fewer threads' time: spare cores serve the HTTP side."""


@dataclass
class CpuSpeed:
    """The verdict for this CPU, and the timings it rests on."""

    dtype: str
    """float32 or bfloat16: what `--dtype auto` runs a bfloat16 checkpoint in on this CPU."""
    num_threads: int
    """Intra-op threads for torch."""
    cpu_model: str
    usable_cores: int
    torch_version: str
    timings_ms: dict[str, float] = field(default_factory=dict)
    """'float32 x 2 threads' -> ms of the timed work."""
    source: str = "measured"
    """measured (now) or cached (an earlier measurement)."""
    gflops: float = 0.0
    """Matmul rate of the chosen dtype and threads in the prefill-shaped part, GFLOP/s (the tuner's peak)."""
    decode_gbps: float = 0.0
    """Weight bytes the decode-shaped part reads per second, GB/s (the tuner's bandwidth: a decode step
    reads every weight once, from caches or memory as the model's size decides)."""

    def to_dict(self) -> dict:
        return asdict(self)


def cpu_model_name() -> str:
    """The CPU's model name from /proc/cpuinfo (platform.processor() elsewhere)."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            key, _, value = line.partition(":")
            if key.strip() == "model name":
                return value.strip()
    except OSError:
        pass
    return platform.processor() or platform.machine() or "unknown CPU"


def omp_threads() -> int | None:
    """OMP_NUM_THREADS when it is a positive integer, else None."""
    value = os.environ.get("OMP_NUM_THREADS", "").strip()
    return int(value) if value.isdigit() and int(value) > 0 else None


def cache_key() -> str:
    """Whatever changes the verdict: the CPU, the cores this process may use, torch, OMP_NUM_THREADS."""
    import torch

    threads = omp_threads()
    fixed = f" | OMP_NUM_THREADS={threads}" if threads else ""
    return f"{cpu_model_name()} | {usable_cores()} cores | torch {torch.__version__}{fixed}"


_seen: dict[tuple[Path, str], CpuSpeed] = {}
"""This process's verdicts, so that every model load after the first skips even the file read."""


def cpu_speed(cache_dir: Path | None = None, refresh: bool = False) -> CpuSpeed:
    """This CPU's verdict: from the cache when it holds one for this key, else measured now and cached."""
    path = (cache_dir or user_cache_dir()) / CACHE_FILE
    key = cache_key()
    if not refresh and (path, key) in _seen:
        return _seen[(path, key)]
    _seen[(path, key)] = speed = _cached_or_measured(path, key, refresh)
    return speed


def _cached_or_measured(path: Path, key: str, refresh: bool) -> CpuSpeed:
    entries = _read_cache(path)
    if not refresh and isinstance(entries.get(key), dict):
        try:
            speed = CpuSpeed(**{**entries[key], "source": "cached"})
        except TypeError:
            speed = None  # an entry of another shape: measure again
        if speed is not None:
            return speed
    speed = measure()
    entries[key] = speed.to_dict()
    try:
        atomic_write(path, json.dumps({"schema": SCHEMA, "entries": entries}, indent=1) + "\n")
    except OSError as exc:  # a read-only home: measure again next time rather than fail
        log.warning("could not cache the CPU measurement in %s: %s", path, exc)
    return speed


def _read_cache(path: Path) -> dict:
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    if not isinstance(data, dict) or data.get("schema") != SCHEMA or not isinstance(data.get("entries"), dict):
        return {}
    return data["entries"]


def thread_candidates(cores: int) -> list[int]:
    return sorted({1, max(1, cores // 2), cores})


def measure() -> CpuSpeed:
    """Time the work (see DECODE_STEPS) for each thread count in float32, then bfloat16 at the best count."""
    import torch

    before = torch.get_num_threads()
    fixed = omp_threads()
    timings: dict[str, float] = {}
    try:
        counts = [fixed] if fixed else thread_candidates(usable_cores())
        for n in counts:
            timings[_label(torch.float32, n)] = _time_work(torch.float32, n)
        threads = counts[0]
        for n in counts[1:]:
            if timings[_label(torch.float32, n)] <= THREAD_MARGIN * timings[_label(torch.float32, threads)]:
                threads = n
        timings[_label(torch.bfloat16, threads)] = _time_work(torch.bfloat16, threads)
        bf16 = timings[_label(torch.bfloat16, threads)] <= BF16_MARGIN * timings[_label(torch.float32, threads)]
        dtype = torch.bfloat16 if bf16 else torch.float32
        gflops, decode_gbps = _rates(dtype, threads)
    finally:
        torch.set_num_threads(before)
    return CpuSpeed(
        dtype="bfloat16" if bf16 else "float32",
        num_threads=threads,
        cpu_model=cpu_model_name(),
        usable_cores=usable_cores(),
        torch_version=torch.__version__,
        timings_ms={k: round(v * 1e3, 3) for k, v in timings.items()},
        gflops=round(gflops, 2),
        decode_gbps=round(decode_gbps, 2),
    )


def _label(dtype, threads: int) -> str:
    return f"{str(dtype).removeprefix('torch.')} x {threads} thread{'s' if threads > 1 else ''}"


def _time_work(dtype, threads: int) -> float:
    """Seconds of the timed work, the best of REPEATS (after one untimed run)."""
    import torch

    torch.set_num_threads(threads)
    generator = torch.Generator().manual_seed(0)
    weight = torch.randn(HIDDEN, HIDDEN, generator=generator).to(dtype)
    decode = torch.randn(DECODE_ROWS, HIDDEN, generator=generator).to(dtype)
    prefill = torch.randn(PREFILL_ROWS, HIDDEN, generator=generator).to(dtype)
    best = float("inf")
    with torch.inference_mode():
        for repeat in range(REPEATS + 1):
            start = time.perf_counter()
            torch.nn.functional.linear(prefill, weight)
            for _ in range(DECODE_STEPS):
                torch.nn.functional.linear(decode, weight)
            if repeat:
                best = min(best, time.perf_counter() - start)
    return best


def _rates(dtype, threads: int) -> tuple[float, float]:
    """(GFLOP/s of the prefill-shaped matmul, GB/s of weights read by the decode-shaped one), best of REPEATS."""
    import torch

    torch.set_num_threads(threads)
    weight = torch.randn(HIDDEN, HIDDEN).to(dtype)
    prefill, decode = torch.randn(PREFILL_ROWS, HIDDEN).to(dtype), torch.randn(DECODE_ROWS, HIDDEN).to(dtype)
    best = {"prefill": float("inf"), "decode": float("inf")}
    with torch.inference_mode():
        for repeat in range(REPEATS + 1):
            for name, x in (("prefill", prefill), ("decode", decode)):
                start = time.perf_counter()
                for _ in range(4):
                    torch.nn.functional.linear(x, weight)
                if repeat:
                    best[name] = min(best[name], (time.perf_counter() - start) / 4)
    flops = 2 * PREFILL_ROWS * HIDDEN * HIDDEN / best["prefill"] / 1e9
    return flops, weight.numel() * weight.element_size() / best["decode"] / 1e9


def apply_cpu_threads(share: int = 1) -> CpuSpeed:
    """Set torch's intra-op threads to this CPU's verdict (split over `share` processes, such as
    tensor-parallel ranks); returns the verdict."""
    import torch

    speed = cpu_speed()
    torch.set_num_threads(max(1, speed.num_threads // share))
    return speed
