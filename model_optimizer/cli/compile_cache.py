"""`mopt compile-cache`: the Triton kernels of an engine start, compiled ahead of time.

    mopt compile-cache build --model DIR [engine flags as for serve] [--arch 9.0] [--num-sms 132]
                             [--gpu-name "NVIDIA H200"] [--output FOLDER] [--jobs N]
    mopt compile-cache path [--arch 9.0]

`build` needs no GPU: it walks an engine start's forward passes on the meta device and compiles every
Triton kernel they launch for the target architecture (runtime/runner/aot_build.py), into the folder
the engine reads on such a GPU (the versions and architecture name it: kernels/compile_cache.py), or
into --output, in --jobs processes at once (each kernel variant compiled by one of them). Copy that
folder into an image at the same path (or point MOPT_COMPILE_CACHE_DIR at the root that holds it)
and the first start compiles nothing. Another Triton, torch or
model_optimizer version, or an edited kernel, is a miss that compiles as before: nothing stale runs.
`path` prints the folder for the architecture.
"""

from __future__ import annotations

import argparse
import json
import signal
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from model_optimizer.cli.args import add_dataclass_args, dataclass_from_args
from model_optimizer.runtime.config import EngineConfig


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
    from model_optimizer.runtime.kernels.compile_cache import cache_folder

    try:
        major, minor = (int(part) for part in args.arch.split("."))
    except ValueError:
        major = minor = -1
    if major < 1 or minor < 0:  # "-1.0" parsed, and named a folder sm-10
        raise ValueError(f"--arch must be a compute capability such as 9.0, got {args.arch!r}")
    target = AotTarget((major, minor), args.num_sms, args.gpu_name)
    if args.output is not None and not args.output.strip():  # "" was read as unset: the default cache filled
        raise ValueError("--output is empty; give a folder, or leave --output out for the engine's own cache")
    folder = Path(args.output) if args.output else cache_folder(f"sm{target.arch}")
    if args.action == "path":
        print(folder)
        return 0
    from model_optimizer.runtime.runner.aot_workers import build_parallel

    config = dataclass_from_args(EngineConfig, args)
    jobs = _jobs(args.jobs)
    _check_build(config, args.num_sms, folder)  # here, not as a traceback from each build worker
    folder.mkdir(parents=True, exist_ok=True)
    with _sigterm_as_interrupt():
        report = build_parallel(config, target, folder, jobs)
    launches = sum(report["kernel_launches"].values())
    shown = {k: report[k] for k in ("folder_key", "entries", "compiled", "seconds") if k in report}
    print(json.dumps(shown | {"launches": launches, "jobs": report.get("jobs", 1)}))
    print(folder)
    return 0


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


@contextmanager
def _sigterm_as_interrupt() -> Iterator[None]:
    """SIGTERM (`timeout`, `kill`) stops the build as Ctrl-C does: the workers are stopped and the
    claims folder removed (the default action ended this process at once and left that folder)."""

    def interrupt(signum: int, frame: object) -> None:
        raise KeyboardInterrupt

    if threading.current_thread() is not threading.main_thread():  # only the main thread may set handlers
        yield
        return
    previous = signal.signal(signal.SIGTERM, interrupt)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)
