"""The ahead-of-time build (aot_build.py) in several processes at once, sharing the compiles.

Triton compiles a kernel in Python and in one thread, so processes are the way to use several cores.
Each worker walks the whole start and compiles only the kernel variants no other worker has claimed yet
in a shared folder (kernels/aot.py's compile_only): all walk in the same order, so the compiles spread
over the workers as over a queue, and none is compiled twice. Triton writes its cache entries
atomically, so the workers fill one folder.

Workers are fresh interpreters (`python -m model_optimizer.runtime.runner.aot_workers JOB INDEX`), not
multiprocessing children: a spawned child would import the caller's main module again, and a user's
script that builds an `LLM` without a `__main__` guard would run again in every worker.
"""

from __future__ import annotations

import json
import os
import pickle
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from model_optimizer.common.processes import exit_with_parent, usable_cores
from model_optimizer.runtime.config import EngineConfig
from model_optimizer.runtime.kernels.aot import AotTarget

MAX_JOBS = 8
"""Most workers by default: a start has a few dozen kernel variants."""
JOB_FILE = "job.pickle"
BUILD_TIMEOUT_S = 3600.0
"""Longest `mopt compile-cache build` waits for its workers."""


def default_jobs() -> int:
    """The cores this process may run on, 1 to MAX_JOBS."""
    return max(1, min(MAX_JOBS, usable_cores()))


@dataclass
class Finished:
    """What a build's workers did: the reports of those that finished, how many were stopped at the
    time limit, how many failed, and the failed ones' output."""

    reports: list[dict]
    late: int
    failed: int
    errors: str
    refusal: str | None = None
    """The first refusal a worker wrote (a ValueError or OSError of the build: the user's input), if any."""


@dataclass
class Workers:
    """Worker processes of one build, their shared claims folder, and when they started."""

    processes: list[subprocess.Popen]
    claims: Path
    started: float

    def wait(self, timeout: float) -> Finished:
        """Wait for the workers, stopping any still running after `timeout` seconds; removes the claims folder.
        Interrupted (KeyboardInterrupt, an engine shutting down), it stops them all before it raises."""
        deadline = time.monotonic() + timeout
        late = []
        try:
            for process in self.processes:
                try:
                    process.wait(max(0.0, deadline - time.monotonic()))
                except subprocess.TimeoutExpired:
                    process.kill()
                    process.wait()
                    late.append(process)
        except BaseException:
            self.stop()
            raise
        failed = [i for i, p in enumerate(self.processes) if p.returncode != 0 and p not in late]
        errors = "\n".join((self.claims / f"worker-{i}.log").read_text(errors="replace")[-2000:] for i in failed)
        reports = [json.loads(p.read_text()) for p in sorted(self.claims.glob("report-*.json"))]
        refusals = [p.read_text() for p in sorted(self.claims.glob("refused-*.txt"))]
        shutil.rmtree(self.claims, ignore_errors=True)
        return Finished(reports, len(late), len(failed), errors, refusals[0] if refusals else None)

    def stop(self) -> None:
        """Kill the workers still running, reap them all and remove the claims folder (a start that fails
        or is interrupted before its join: nothing of the build outlives it)."""
        _stop(self.processes, self.claims)


def _stop(processes: list[subprocess.Popen], claims: Path) -> None:
    for process in processes:
        if process.poll() is None:
            process.kill()
    for process in processes:
        process.wait()
    shutil.rmtree(claims, ignore_errors=True)


def start_workers(config: EngineConfig, target: AotTarget, cache_dir: Path, jobs: int) -> Workers:
    """Start `jobs` workers building `config`'s start for `target` into `cache_dir`. OSError when the
    folders cannot be made or a worker cannot start (none is left running then)."""
    cache_dir.mkdir(parents=True, exist_ok=True)
    claims = Path(tempfile.mkdtemp(prefix="mopt-aot-claims-"))
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [_source_root(), os.environ.get("PYTHONPATH")]))}
    env.pop("TRITON_INTERPRET", None)  # the interpreter replaces the JIT that compiles
    processes: list[subprocess.Popen] = []
    try:
        (claims / JOB_FILE).write_bytes(pickle.dumps((config, target, cache_dir)))
        for index in range(jobs):
            with open(claims / f"worker-{index}.log", "wb") as log:
                command = [sys.executable, "-m", __name__, str(claims / JOB_FILE), str(index), str(os.getpid())]
                processes.append(subprocess.Popen(command, env=env, stdin=subprocess.DEVNULL, stdout=log, stderr=log))
    except BaseException:
        _stop(processes, claims)
        raise
    return Workers(processes, claims, time.monotonic())


def _source_root() -> str | None:
    """The folder holding model_optimizer/ when a fresh interpreter might not find it (a source tree run
    with a relative PYTHONPATH, say); None for an installed package (site-packages on PYTHONPATH would
    come before the standard library)."""
    import site

    root = Path(__file__).resolve().parents[3]
    installed = {Path(p).resolve() for p in [*site.getsitepackages(), site.getusersitepackages()]}
    return None if root in installed else str(root)


def build_parallel(config: EngineConfig, target: AotTarget, cache_dir: Path, jobs: int | None = None) -> dict:
    """aot_build.build over `jobs` workers (default: default_jobs()); the report as `build`'s, with what
    each worker compiled. ValueError with a worker's reason when the build refuses the model or settings;
    RuntimeError with the workers' output when one fails otherwise."""
    from model_optimizer.runtime.runner.aot_build import MANIFEST, build, count_entries

    jobs = default_jobs() if jobs is None else jobs
    if jobs < 1:
        raise ValueError(f"jobs must be at least 1, got {jobs}")
    if jobs == 1:
        return build(config, target, cache_dir)
    workers = start_workers(config, target, cache_dir, jobs)
    finished = workers.wait(timeout=BUILD_TIMEOUT_S)
    reports = finished.reports
    if finished.refusal is not None:  # every worker walks the same start: one says what is wrong with it
        raise ValueError(finished.refusal)
    if finished.late or finished.failed or len(reports) != jobs:
        raise RuntimeError(f"{jobs - len(reports)} of {jobs} build workers failed:\n{finished.errors}")
    report = reports[0] | {
        "jobs": jobs,
        "compiled": sum(r["compiled"] for r in reports),
        "compiled_per_job": [r["compiled"] for r in reports],
        "launchers": sum(r["launchers"] for r in reports),
        "entries": count_entries(cache_dir),
        "seconds": round(time.monotonic() - workers.started, 1),
    }
    (cache_dir / MANIFEST).write_text(json.dumps(report, indent=1) + "\n")
    return report


def main(job: str, index: str, parent: str) -> None:
    from model_optimizer.runtime.runner.aot_build import build

    claims = Path(job).parent  # an engine killed mid-start: nothing else would remove it
    exit_with_parent(int(parent), before_exit=lambda: shutil.rmtree(claims, ignore_errors=True))
    config, target, cache_dir = pickle.loads(Path(job).read_bytes())
    try:
        report = build(config, target, cache_dir, claims=Path(job).parent, manifest=False)
    except (ValueError, OSError) as exc:  # the model or settings refused: the parent says it in one line
        (Path(job).parent / f"refused-{index}.txt").write_text(str(exc))
        print(f"refused: {exc}", file=sys.stderr)  # the worker's log, which a compile-ahead start reports
        sys.exit(2)
    (Path(job).parent / f"report-{index}.json").write_text(json.dumps(report))


if __name__ == "__main__":
    main(*sys.argv[1:4])
