"""`mopt compile-cache`: the Triton kernels of an engine start, compiled ahead of time.

    mopt compile-cache build --model DIR [engine flags as for serve] [--arch 9.0] [--num-sms 132]
                             [--gpu-name "NVIDIA H200"] [--output FOLDER] [--jobs N]
    mopt compile-cache path [--arch 9.0]

`build` needs no GPU: it walks an engine start's forward passes on the meta device and compiles every
Triton kernel they launch for the target architecture (runtime/runner/aot_build.py), into the folder
the engine reads on such a GPU (the versions and architecture name it: kernels/compile_cache.py), or
into --output, in --jobs processes at once (each kernel variant compiled by one of them), with a progress
bar of the variants compiled (plain lines on stderr where it is no terminal). Copy that
folder into an image at the same path (or point MOPT_COMPILE_CACHE_DIR at the root that holds it)
and the first start compiles nothing. Another Triton, torch or
model_optimizer version, or an edited kernel, is a miss that compiles as before: nothing stale runs;
nor does an entry cut short by an interrupted copy (each entry's index records its files' sizes).
`path` prints the folder for the architecture.
"""

from __future__ import annotations

import argparse
import itertools
import json
import shutil
import sys
import tempfile
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING

from model_optimizer.cli.args import add_dataclass_args, dataclass_from_args
from model_optimizer.common.processes import sigterm_raises
from model_optimizer.runtime.config import EngineConfig

if TYPE_CHECKING:
    from model_optimizer.runtime.kernels.aot import AotTarget


def add_parser(subparsers) -> argparse.ArgumentParser:
    parser = subparsers.add_parser(
        "compile-cache",
        help="compile the Triton kernels of an engine start ahead of time (no GPU needed)",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("action", choices=["build", "path"], help="build the cache, or print its folder")
    parser.add_argument("--arch", default="9.0", help="compute capability of the target GPU (9.0: H100/H200)")
    parser.add_argument("--num-sms", type=int, default=132, help="its streaming multiprocessors (H100/H200 SXM: 132)")
    parser.add_argument(
        "--gpu-name", default="NVIDIA H200", help="its name as torch reports it (the tile table applies by name)"
    )
    parser.add_argument("--output", default=None, help="Triton cache folder to fill (default: the engine's own)")
    parser.add_argument(
        "--jobs",
        type=int,
        default=None,
        help="processes that compile at once (default: this machine's cores, at most 8; 1: one process; "
        "more than the cores is lowered to the cores)",
    )
    add_dataclass_args(parser, EngineConfig)
    return parser


def run(args: argparse.Namespace) -> int:
    from model_optimizer.runtime.kernels.aot import AotTarget
    from model_optimizer.runtime.kernels.compile_cache import absolute_path, cache_folder

    target = AotTarget(_capability(args.arch), args.num_sms, args.gpu_name)
    if args.output is not None and not args.output.strip():  # "" was read as unset: the default cache filled
        raise ValueError("--output is empty; give a folder, or leave --output out for the engine's own cache")
    # absolute: the folder printed and filled is the same whatever the working directory of a later start
    folder = absolute_path(Path(args.output)) if args.output else cache_folder(f"sm{target.arch}")
    if args.action == "path":
        print(folder)
        return 0
    config = dataclass_from_args(EngineConfig, args)
    jobs = _jobs(args.jobs)
    _check_build(config, args.num_sms, folder)  # here, not as a traceback from each build worker
    # SIGTERM stops the build as Ctrl-C does: the workers stopped and the claims folder removed
    with _removed_if_new(folder), sigterm_raises(KeyboardInterrupt):
        folder.mkdir(parents=True, exist_ok=True)
        report = _build(config, target, folder, jobs)
    launches = sum(report["kernel_launches"].values())
    shown = {k: report[k] for k in ("folder_key", "entries", "compiled", "seconds") if k in report}
    print(json.dumps(shown | {"launches": launches, "jobs": report.get("jobs", 1)}))
    print(folder)
    return 0


SUPPORTED_ARCHS = ((8, 0), (8, 6), (8, 7), (8, 9), (9, 0), (10, 0), (12, 0))
"""Compute capabilities of NVIDIA GPUs that Triton's NVIDIA backend compiles for (8.0, Ampere, is its
minimum: the engine's kernels need it too, environment/rules/cuda.py). Others were handed to Triton and
ended in an LLVM abort (9.9, 1.0: exit code 134) or a ptxas traceback (5.0) with a part-filled folder."""


def _capability(arch: str) -> tuple[int, int]:
    """--arch as (major, minor), or ValueError (one `error:` line, exit code 2) for anything but a
    capability in SUPPORTED_ARCHS."""
    shown = ", ".join(f"{major}.{minor}" for major, minor in SUPPORTED_ARCHS)
    try:
        major, minor = (int(part) for part in arch.split("."))
    except ValueError:
        major = minor = -1
    if (major, minor) not in SUPPORTED_ARCHS:
        raise ValueError(
            f"--arch must be a compute capability such as 9.0 that Triton compiles for ({shown}), got {arch!r}"
        )
    return major, minor


def _check_build(config: EngineConfig, num_sms: int, folder: Path) -> None:
    """What the build workers would each fail on, checked once in this process: one error line, exit code 2."""
    from model_optimizer.common.fileio import check_writable_folder_path
    from model_optimizer.runtime.hub import localize
    from model_optimizer.runtime.models.model_config import read_config
    from model_optimizer.runtime.runner.aot_build import check_config

    check_config(config)
    if num_sms < 1:
        raise ValueError(f"--num-sms must be a positive integer, got {num_sms}")
    check_writable_folder_path(folder, "--output")  # a file, under one, read-only: not a worker's raw errno
    localize(config)  # a Hub id becomes its snapshot folder; a missing folder is FileNotFoundError
    read_config(config.model)  # config.json present and readable


def _build(config: EngineConfig, target: AotTarget, folder: Path, jobs: int | None) -> dict:
    """aot_workers.build_parallel, with its progress (common.progress): one step per kernel variant compiled,
    out of the variants a walk that compiles nothing counts first (aot.count_variants). A model the build
    refuses is refused by that walk, before any worker starts."""
    from rich.console import Console

    from model_optimizer.common.processes import environment_set
    from model_optimizer.common.progress import batch_progress
    from model_optimizer.runtime.kernels.aot import PROGRESS_ENV, count_variants
    from model_optimizer.runtime.runner.aot_build import build
    from model_optimizer.runtime.runner.aot_workers import build_parallel

    total = count_variants(lambda: build(config, target, folder, manifest=False))
    with (
        tempfile.NamedTemporaryFile(prefix="mopt-aot-progress-") as ticks,
        batch_progress(Console(stderr=True), total, "compiling", _log, unit="kernel variants") as advance,
        _following(Path(ticks.name), advance),
        environment_set(PROGRESS_ENV, ticks.name),
    ):
        return build_parallel(config, target, folder, jobs)


def _log(message: str) -> None:
    print(f"mopt compile-cache: {message}", file=sys.stderr, flush=True)


FOLLOW_INTERVAL_S = 0.2
"""How often the progress reads how many variants the build has compiled."""


@contextmanager
def _following(ticks: Path, advance: Callable[[int], None]) -> Iterator[None]:
    """A thread that turns what the build appends to `ticks` (a byte per variant compiled, aot.PROGRESS_ENV)
    into progress steps, until the block ends; its last look comes after the build's last byte."""
    stop = threading.Event()

    def follow() -> None:
        seen = 0
        while True:
            stopped = stop.wait(FOLLOW_INTERVAL_S)
            size = ticks.stat().st_size
            if size > seen:
                advance(size - seen)
                seen = size
            if stopped:
                return

    thread = threading.Thread(target=follow, name="mopt-aot-progress", daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join()


@contextmanager
def _removed_if_new(folder: Path) -> Iterator[None]:
    """When the block fails (an error, Ctrl-C), remove `folder` and the parents of it that did not exist
    before the block, with what the failed build wrote in them: a failed build leaves no folder, empty or
    part-filled, of its own making (a part-filled one looked like a cache to ship). A folder that existed
    before is kept, with what it held and what the build added (valid entries, written atomically)."""
    made = list(itertools.takewhile(lambda path: not path.exists(), (folder, *folder.parents)))  # deepest first
    try:
        yield
    except BaseException:
        if made:
            shutil.rmtree(made[-1], ignore_errors=True)
        raise


def _jobs(requested: int | None) -> int | None:
    """--jobs checked, and lowered to the cores this process may run on: each worker is an interpreter
    that imports torch, and compiling is CPU work, so one beyond the cores only costs memory (100000
    started hundreds of workers for a few dozen kernels). None: the default (aot_workers.default_jobs)."""
    from model_optimizer.common.processes import usable_cores

    if requested is None:
        return None
    if requested < 1:
        raise ValueError(f"--jobs must be at least 1, got {requested}")
    cores = usable_cores()
    if requested > cores:
        print(f"--jobs {requested} lowered to {cores}, the cores this process may run on", file=sys.stderr)
        return cores
    return requested
