"""Live progress of one run: on a terminal a rich bar updated a few times a second, never per request;
elsewhere (a log file, CI) a plain line every PLAIN_INTERVAL_S seconds."""

from __future__ import annotations

import threading
import time

from rich.console import Console
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

from model_optimizer.optimizer.bench.record import RequestRecord

REFRESH_PER_SECOND = 4
PLAIN_INTERVAL_S = 10.0
"""Seconds between plain progress lines when the console is not a terminal."""


class RunProgress:
    """Count finished and failed requests; show them against the request count or duration."""

    def __init__(self, label: str, total: int | None, duration: float | None, enabled: bool, console: Console):
        self.label, self.total, self.duration = label, total, duration
        self.num_ok = self.num_failed = 0
        self.tokens = 0
        self._t0 = 0.0
        self._progress = None
        self._console = console
        self._plain: threading.Thread | None = None
        self._done = threading.Event()
        if enabled and not console.is_terminal:
            self._plain = threading.Thread(target=self._print_lines, name="mopt-bench-progress", daemon=True)
        elif enabled:
            self._progress = Progress(
                TextColumn("[bold]{task.description}"),
                BarColumn(),
                TextColumn("{task.fields[stats]}"),
                TimeElapsedColumn(),
                console=console,
                refresh_per_second=REFRESH_PER_SECOND,
                get_time=time.perf_counter,
            )

    def __enter__(self) -> RunProgress:
        self._t0 = time.perf_counter()
        if self._plain:
            self._plain.start()
        if self._progress:
            self._progress.start()
            bar_total = self.duration if self.total is None else self.total
            self._task = self._progress.add_task(self.label, total=bar_total, stats="")
            # rich redraws from its own thread; the fields are read there, so the event loop pays nothing
            self._progress.update(self._task, stats=_LiveStats(self))
        return self

    def __exit__(self, *exc: object) -> None:
        self._done.set()
        if self._plain:
            self._plain.join()
        if self._progress:
            self._progress.update(self._task, completed=self._completed())
            self._progress.stop()

    def record(self, rec: RequestRecord) -> None:
        self.count(int(rec.ok), int(not rec.ok), rec.output_tokens if rec.ok else 0)

    def count(self, num_ok: int, num_failed: int, tokens: int) -> None:
        """Requests finished since the last call (a worker process reports them in batches)."""
        self.num_ok += num_ok
        self.num_failed += num_failed
        self.tokens += tokens
        if self._progress:
            self._progress.update(self._task, completed=self._completed())

    def _print_lines(self) -> None:
        """A plain line every PLAIN_INTERVAL_S until the run ends (from this thread: the loop pays nothing)."""
        while not self._done.wait(PLAIN_INTERVAL_S):
            elapsed = time.perf_counter() - self._t0
            goal = f" of {self.total} requests" if self.total is not None else ""
            goal += f" of {self.duration:g} s" if self.total is None and self.duration else ""
            line = f"{self.label}: {_LiveStats(self)} ({elapsed:.0f} s{goal})"
            self._console.print(line, highlight=False, markup=False)

    def _completed(self) -> float:
        if self.total is None:
            return min(time.perf_counter() - self._t0, self.duration or 0.0)
        return self.num_ok + self.num_failed


class _LiveStats:
    """Formats the counters each time rich renders the bar."""

    def __init__(self, progress: RunProgress) -> None:
        self.p = progress

    def __str__(self) -> str:
        elapsed = max(time.perf_counter() - self.p._t0, 1e-9)
        done = self.p.num_ok + self.p.num_failed
        return (
            f"{done} done, {self.p.num_failed} failed, {done / elapsed:.1f} req/s, {self.p.tokens / elapsed:.0f} tok/s"
        )

    def __format__(self, spec: str) -> str:  # rich fills columns with str.format
        return str(self)
