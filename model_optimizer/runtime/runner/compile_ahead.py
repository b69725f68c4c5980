"""A cold engine start's Triton kernels compiled in parallel, while the weights load.

On a GPU the first forward passes of a start (the profiling prefill, the warm-up prefills, one decode
forward per CUDA-graph bucket) compile every Triton kernel variant they meet, one after another, in the
engine's own thread: ~10 s of a fresh H200 start of Qwen3-0.6B (README "Start-up"). The ahead-of-time
build (aot_build.py) knows those variants without running anything. So when this start's variants are
not known to be in the cache, the runner starts that build at once, in worker processes sharing the
compiles (aot_workers.py), for this GPU and into the folder Triton reads
(TRITON_CACHE_DIR, compile_cache.configure_compile), and waits for it just before its first forward:
the compiles use the host's cores meanwhile instead of one core afterwards, and the forwards then find
every kernel in the cache. Whatever the workers miss or fail at, the engine compiles as before.

Once a start has captured its graphs, a marker in the cache folder (named by a hash of the model's
config.json, the settings the walk reads, the environment switches that change the kernels compiled
(KERNEL_SWITCHES, Triton's own) and the GPU) says its kernels are there: later starts of the same
settings (a warm start) start no workers. MOPT_COMPILE_JOBS sets the number of workers; unset or 0
(the default, see default_jobs) the start compiles in its own thread.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import os
import subprocess
import time
from collections.abc import Iterator
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING

from model_optimizer.runtime.config import EngineConfig
from model_optimizer.runtime.kernels.aot import AotTarget
from model_optimizer.runtime.runner.aot_build import count_entries
from model_optimizer.runtime.runner.aot_workers import Finished, Workers, start_workers

if TYPE_CHECKING:
    import torch

log = logging.getLogger(__name__)

JOBS_ENV = "MOPT_COMPILE_JOBS"
JOIN_TIMEOUT_S = 180.0
"""Longest a start waits for its workers; then it stops them and compiles what is missing itself."""
WALK_FIELDS = (
    "dtype",
    "quantization",
    "kv_cache_dtype",
    "block_size",
    "max_num_seqs",
    "max_num_batched_tokens",
    "max_model_len",
    "num_kv_blocks",
    "enforce_eager",
)
"""The settings the build's walk reads (aot_build.walk_start, meta_model), and enforce_eager: an eager
start never runs the decode graphs' padded batches, so its marker must not vouch for them."""


KERNEL_SWITCHES = (
    "MOPT_PDL",  # kernels/pdl.py: the PDL constexpr and launch option of most kernels
    "MOPT_INT4_GLUON",  # kernels/int4_gluon.py: the Gluon kernel or our Triton program for int4 weights
    "MOPT_DENSE_KERNELS",  # kernels/dense_linear.py: our matmul kernels or F.linear
    "MOPT_FP8_W8A8_MIN_ROWS",  # kernels/quant_linear.py: which row counts take the W8A8 kernels
    "MOPT_INT8_W8A8_MIN_ROWS",
    "MOPT_ATTENTION_FP8_TILES",  # kernels/paged_attention.py: the fp8 decode kernel's tiles
    "MOPT_NORM_ROUTE_TILES",  # kernels/moe_routing.py: the routing kernel's tiles
    "MOPT_QUANT_TILES",  # kernels/quant_tiles.py: a tile table (its file's contents count too)
    "MOPT_MOE_TILES",  # kernels/moe_tiles.py: a tile table (its file's contents count too)
)
"""The environment variables our kernels read to choose a kernel, its variant or its constexprs: each
is part of the marker's key, so a start under another value does not take another's kernels as compiled
(tests/runtime/runner/test_compile_ahead.py checks the kernels read no MOPT_ variable missing here)."""


def default_jobs() -> int:
    """MOPT_COMPILE_JOBS, else 0 (off): on the H200 the workers lost to the engine's own compiles, and
    tied with them once bytecode was kept (README "Start-up"), so a cold start gains nothing from them
    until that changes; a shipped cache (`mopt compile-cache build`) is the fast path."""
    if not os.environ.get(JOBS_ENV):
        return 0
    try:
        return max(0, int(os.environ[JOBS_ENV]))
    except ValueError:
        raise ValueError(f"{JOBS_ENV} must be a whole number of processes, got {os.environ[JOBS_ENV]!r}") from None


def marker_path(cache_dir: Path, config: EngineConfig, model_dir: Path, target: AotTarget) -> Path:
    """The file that says a start of these settings, kernel switches and GPU has all its kernels in `cache_dir`."""
    settings = {name: getattr(config, name) for name in WALK_FIELDS}
    blob = json.dumps([settings, asdict(target), kernel_switches()], sort_keys=True, default=str).encode()
    config_json = Path(model_dir) / "config.json"
    digest = hashlib.sha256(blob + (config_json.read_bytes() if config_json.is_file() else b"")).hexdigest()
    return cache_dir / f"mopt-start-{digest[:24]}.done"


def kernel_switches() -> dict[str, str]:
    """The KERNEL_SWITCHES that are set, a tile table's file by its contents' hash beside its path, and the
    variables Triton keys its entries by (TRITON_DEFAULT_FP_FUSION, ...: another value misses every entry)."""
    switches = {name: os.environ[name] for name in KERNEL_SWITCHES if os.environ.get(name)}
    for name in ("MOPT_QUANT_TILES", "MOPT_MOE_TILES"):
        table = Path(switches.get(name, ""))
        if table.is_file():
            switches[name] += "@" + hashlib.sha256(table.read_bytes()).hexdigest()
    try:
        from triton._C.libtriton import get_cache_invalidating_env_vars
    except ImportError:  # another Triton: the kernel switches alone
        return switches
    return switches | {f"triton:{name}": str(value) for name, value in get_cache_invalidating_env_vars().items()}


@dataclass
class CompileAhead:
    """Workers compiling a start's kernels; `join` before the first forward, `done` after the graphs."""

    workers: Workers
    marker: Path
    """In the cache folder the workers fill."""
    entries_before: int

    def join(self, timeout: float = JOIN_TIMEOUT_S) -> Finished:
        """Wait for the workers (stopping any still running after `timeout` seconds) and log what they did."""
        finished = self.workers.wait(timeout)
        trouble = ""
        if finished.late or finished.failed:
            trouble = f" ({finished.late} stopped at the time limit, {finished.failed} failed: the engine compiles what they missed)"
            log.warning("compile-ahead workers: %s", finished.errors[-2000:] or "stopped")
        log.info(
            "compiled ahead: %d new kernel variants in %.1f s by %d processes%s",
            count_entries(self.marker.parent) - self.entries_before,
            time.monotonic() - self.workers.started,
            len(self.workers.processes),
            trouble,
        )
        return finished

    def stop(self) -> None:
        """Kill the workers, for a start that fails before its join (nothing of the build outlives it)."""
        self.workers.stop()

    def done(self) -> None:
        """The start has compiled everything its forwards met: later starts of these settings need no workers."""
        write_marker(self.marker)


@contextlib.contextmanager
def stopped_on_error(ahead: CompileAhead | None) -> Iterator[None]:
    """The workers of `ahead` stopped if the block raises (a start failing between `start` and `join`)."""
    try:
        yield
    except BaseException:
        if ahead is not None:
            ahead.stop()
        raise


def write_marker(marker: Path) -> None:
    try:
        marker.write_text(time.strftime("%Y-%m-%dT%H:%M:%SZ\n", time.gmtime()))
    except OSError as exc:  # a read-only cache folder (a shipped image): the next start just checks again
        log.debug("could not write %s: %s", marker, exc)


def start(
    config: EngineConfig, model_dir: Path, target: AotTarget, cache_dir: Path, jobs: int | None = None
) -> CompileAhead | None:
    """Start the workers for this start's kernels, or None: none wanted (jobs 0), tensor parallelism (each
    rank compiles its own shard's), the marker says the cache holds them already, or they could not start
    (logged: the start goes on and compiles as without them)."""
    jobs = default_jobs() if jobs is None else jobs
    if jobs < 1 or config.tensor_parallel_size != 1:
        return None
    marker = marker_path(cache_dir, config, model_dir, target)
    if marker.exists():
        return None
    walk = replace(config, model=str(model_dir), speculative_config=None)  # the target model's kernels only
    try:
        entries = count_entries(cache_dir)
        workers = start_workers(walk, target, cache_dir, jobs)
    except (OSError, subprocess.SubprocessError) as exc:  # an unwritable folder, no interpreter to start
        log.warning("no compile-ahead workers (the engine compiles its kernels itself): %s", exc)
        return None
    return CompileAhead(workers, marker, entries)


def target_of(device_index: int) -> AotTarget:
    """The AOT target that is this GPU (what the engine's kernels ask of it: kernels/aot.device_facts)."""
    import torch

    props = torch.cuda.get_device_properties(device_index)
    return AotTarget((props.major, props.minor), props.multi_processor_count, props.name)


_GPU_STARTS = [0]
"""Engines this process has started on a GPU."""


def for_engine_start(config: EngineConfig, model_dir: Path, device: torch.device) -> CompileAhead | None:
    """`start` for this GPU and Triton's cache folder, or None: the CPU, no folder set, no
    workers asked for (the default), or not this process's first GPU start (Triton's in-memory kernels
    of the earlier ones serve the next: a test session or a notebook building several engines would pay
    for workers it does not need). Off, it costs a start nothing: no GPU query, no hash of the config."""
    cache_dir = os.environ.get("TRITON_CACHE_DIR")
    if device.type != "cuda" or not cache_dir or not (model_dir / "config.json").is_file():
        return None
    jobs = default_jobs()
    if jobs < 1:
        return None
    _GPU_STARTS[0] += 1
    if _GPU_STARTS[0] > 1:
        return None
    return start(config, model_dir, target_of(device.index or 0), Path(cache_dir), jobs)
