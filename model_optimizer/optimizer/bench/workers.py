"""Send one plan's load from several processes, when one event loop on one core cannot keep up.

One asyncio client parses every streamed chunk on one core; against a server streaming tens of
thousands of chunks per second that core saturates and its own lag shows up as the server's
latency. `execute_plan` runs a plan in this process (one worker) or spreads it over N spawned
worker processes, each running the same BenchClient, `run_closed` / `run_open` and
LoopLagMonitor on its share:
- closed loop: the concurrency is split over the workers, and every freed slot of any worker
  takes the next request index from one counter they share, so the run sends requests 0, 1, 2, ...
  exactly as one process would;
- open loop and trace: this process draws the whole schedule (`load.schedule`, same seed, same
  times) and worker w owns arrivals w, w + N, w + 2N, ...; a --max-concurrency cap is split too.
The parent waits until every worker is ready, then sends them one start time. Send and chunk
times are `time.perf_counter()` minus that start; perf_counter is CLOCK_MONOTONIC on Linux
(system-wide), and each worker's clock is checked against the parent's before the start.
Records come back to the parent, which merges them in request order; a worker that dies or
raises fails the run with a `WorkerFailed` naming it. Workers ignore SIGINT and SIGTERM and stop
when this process tells them (worker_process.py), so a signal to the whole process group (Ctrl-C on
a terminal, `timeout`, `kill -TERM -PGID`) still brings back every request they finished; after an
error the workers still running are killed, and a worker exits by itself when the parent dies.
"""

from __future__ import annotations

import asyncio
import dataclasses
import multiprocessing
import signal
import time
from collections.abc import Callable

import numpy as np

from model_optimizer.optimizer.bench.client import BenchClient, ClientConfig
from model_optimizer.optimizer.bench.load import RunPlan, run_load, schedule
from model_optimizer.optimizer.bench.overhead import LoopLagMonitor
from model_optimizer.optimizer.bench.record import RequestRecord
from model_optimizer.optimizer.bench.stopping import RunStop
from model_optimizer.optimizer.bench.worker_process import WorkerTask, ending, signals_held, worker_main
from model_optimizer.optimizer.bench.workloads import BenchRequest

START_DELAY_S = 0.05
"""The shared start is this far after the parent sends it, so every worker is waiting when it comes."""
CLOCK_TOLERANCE_S = 0.5
"""A worker whose perf_counter differs from the parent's by more than this (against time.time) has
its own clock: its times could not be merged."""
STOP_TIMEOUT_S = 5.0
"""Seconds a worker gets to exit (after its records, or a kill) before the parent kills it and moves on."""

Counts = Callable[[int, int, int], None]
"""Progress callback: (num_ok, num_failed, output_tokens) finished since the last call."""


class WorkerFailed(RuntimeError):
    """A worker process died or raised: the run has no complete result."""

    def __init__(self, message: str, detail: str = "") -> None:
        super().__init__(message)
        self.detail = detail
        """The worker's traceback, when it raised."""


async def execute_plan(
    cfg: ClientConfig,
    plan: RunPlan,
    requests: list[BenchRequest],
    bodies: list[bytes],
    rng: np.random.Generator,
    num_workers: int = 1,
    on_counts: Counts = lambda ok, failed, tokens: None,
    stop: RunStop | None = None,
) -> tuple[list[RequestRecord], list[dict]]:
    """Run `plan` from `num_workers` processes; return the records in request order and, per worker,
    its loop lag, CPU and wall time (LoopLagMonitor's figures), its number of requests, of arrivals it
    never sent (`num_unsent`) and why it stopped early (`stopped`, None when it did not).

    `stop` ends the run early (stopping.py); with worker processes it is passed on to each of them."""
    stop = stop or RunStop()
    if min(num_workers, worker_limit(plan, requests)) == 1:
        return await _run_here(cfg, plan, requests, bodies, rng, on_counts, stop)
    tasks = split_plan(cfg, plan, requests, bodies, rng, num_workers)
    group = _WorkerGroup(tasks, counter=multiprocessing.get_context("spawn").Value("q", 0))
    try:
        await group.start()
        stop.on_stop(group.tell_stop)
        if stop.is_set():
            group.tell_stop(stop.reason)
        return await group.finish(on_counts)
    finally:
        group.stop()


async def _run_here(
    cfg, plan, requests, bodies, rng, on_counts: Counts, stop: RunStop
) -> tuple[list[RequestRecord], list[dict]]:
    def counted(rec: RequestRecord) -> None:
        on_counts(int(rec.ok), int(not rec.ok), rec.output_tokens if rec.ok else 0)

    monitor = LoopLagMonitor()
    async with BenchClient(cfg, plan.slots(), 0.0, stop) as client:
        monitor.start()
        records = await run_load(client, plan, requests, bodies, rng, counted)
        loop = await monitor.stop()
    return records, [loop | ending(records, stop)]


def worker_limit(plan: RunPlan, requests: list[BenchRequest]) -> int:
    """The most workers `plan` can keep busy: one slot or one request each at least."""
    if plan.mode == "closed":
        return plan.concurrency or 1
    limits = [plan.max_concurrency, plan.num_requests, len(requests) if plan.mode == "trace" else None]
    return min((x for x in limits if x is not None), default=1 << 30)


def split_plan(
    cfg: ClientConfig,
    plan: RunPlan,
    requests: list[BenchRequest],
    bodies: list[bytes],
    rng: np.random.Generator,
    num_workers: int,
) -> list[WorkerTask]:
    """Each worker's share: its slots of a closed loop, or every n-th arrival of the schedule
    (n: `num_workers`, or fewer when the plan cannot keep that many busy)."""
    n = max(1, min(num_workers, worker_limit(plan, requests)))
    arrivals = None if plan.mode == "closed" else schedule(plan, requests, rng)
    tasks = []
    for w in range(n):
        if plan.mode == "closed":
            share = dataclasses.replace(plan, concurrency=_part(plan.concurrency or 1, n, w))
        else:
            share = dataclasses.replace(
                plan, max_concurrency=plan.max_concurrency and _part(plan.max_concurrency, n, w)
            )
        owned = None if arrivals is None else arrivals[w::n]
        tasks.append(WorkerTask(w, cfg, share, requests, bodies, owned))
    return tasks


def _part(total: int, n: int, w: int) -> int:
    """Worker w's part of `total` split as evenly as possible over n workers."""
    return total // n + (w < total % n)


class _WorkerGroup:
    """The spawned workers of one run and the pipes their messages come back on."""

    def __init__(self, tasks: list[WorkerTask], counter) -> None:
        ctx = multiprocessing.get_context("spawn")  # no fork: the parent may run threads (rich, telemetry)
        self.n, self.tasks = len(tasks), tasks
        self.counter = counter  # Process.start() drops its args: this keeps the shared counter alive
        self.procs, self.conns, self._child_ends = [], [], []
        self.finished = False
        """True once every worker sent its records: each then exits by itself."""
        for task in tasks:
            ours, theirs = ctx.Pipe()
            self.procs.append(
                ctx.Process(
                    target=worker_main,
                    args=(theirs, counter),
                    name=f"mopt-bench-worker-{task.index}",
                    daemon=True,
                )
            )
            self.conns.append(ours)
            self._child_ends.append(theirs)

    async def start(self) -> None:
        """Spawn the workers, wait until each is ready with a clock shared with ours, and give them one start."""
        with signals_held():  # a signal while they start must not kill them (worker_process.py)
            for proc, theirs in zip(self.procs, self._child_ends):
                proc.start()
                theirs.close()  # only the worker holds it now: its death reads as EOF here
        # the tasks (every prepared request) go through the pipe once all workers are starting, not as
        # Process arguments, which spawn hands over only after a child's imports: one start after the other
        for w, task in enumerate(self.tasks):
            self._send(w, task)
        readies = await self._until("ready")
        for w, (perf, wall) in enumerate(readies):
            skew = (perf - wall) - (time.perf_counter() - time.time())
            if abs(skew) > CLOCK_TOLERANCE_S:
                raise WorkerFailed(
                    f"bench worker {w + 1} of {self.n}: its perf_counter clock is not this process's "
                    f"({skew:+.3f} s apart): its times could not be merged"
                )
        t0 = time.perf_counter() + START_DELAY_S
        for w in range(self.n):
            self._send(w, t0)

    def tell_stop(self, reason: str | None) -> None:
        """Ask every worker to stop sending (and to cancel what is in flight after the grace)."""
        for conn in self.conns:
            try:
                conn.send(("stop", reason))
            except OSError:
                pass  # a worker that died is reported by finish()

    def _send(self, w: int, message: object) -> None:
        try:
            self.conns[w].send(message)
        except OSError:
            raise WorkerFailed(f"bench worker {w + 1} of {self.n} died ({self._exit(w)}) as it started") from None

    async def finish(self, on_counts: Counts) -> tuple[list[RequestRecord], list[dict]]:
        """Wait for every worker's records; merge them in request order."""
        dones = await self._until("done", on_counts)
        self.finished = True
        records = sorted((rec for records, _ in dones for rec in records), key=lambda r: r.index)
        return records, [loop for _, loop in dones]

    async def _until(self, kind: str, on_counts: Counts | None = None) -> list[tuple]:
        """The payload of one `kind` message from every worker, read as they come; WorkerFailed as soon
        as one reports an error or its pipe closes first (the process died)."""
        loop = asyncio.get_running_loop()
        got: dict[int, tuple] = {}
        ready = loop.create_future()

        def readable(w: int) -> None:
            conn = self.conns[w]
            error = None
            try:
                while w not in got and error is None and conn.poll():
                    msg = conn.recv()
                    if msg[0] == "progress" and on_counts is not None:
                        on_counts(*msg[1:])
                    elif msg[0] == "error":
                        error = WorkerFailed(f"bench worker {w + 1} of {self.n} failed: {msg[1]}", msg[2])
                    elif msg[0] == kind:
                        got[w] = msg[1:]
            except (EOFError, OSError):
                error = WorkerFailed(
                    f"bench worker {w + 1} of {self.n} died ({self._exit(w)}) before it finished the run"
                )
            if w in got or error is not None:
                loop.remove_reader(conn.fileno())
            if ready.done():
                return
            if error is not None:
                ready.set_exception(error)
            elif len(got) == self.n:
                ready.set_result(None)

        for w, conn in enumerate(self.conns):
            loop.add_reader(conn.fileno(), readable, w)
        try:
            await ready
        finally:
            for conn in self.conns:
                loop.remove_reader(conn.fileno())
        return [got[w] for w in range(self.n)]

    def _exit(self, w: int) -> str:
        proc = self.procs[w]
        proc.join(STOP_TIMEOUT_S)
        code = proc.exitcode
        if code is None:
            return "its pipe closed"
        if code < 0:
            return f"killed by {signal.Signals(-code).name}"
        return f"exit code {code}"

    def stop(self) -> None:
        """Wait for the workers to exit and release the pipes. After an error (a worker failed, the
        parent's own) the others are killed: they ignore SIGTERM, and their records are not wanted."""
        for proc in self.procs:
            if not self.finished and proc.is_alive():
                proc.kill()
        for proc in self.procs:
            if proc.pid is None:
                continue  # never started
            proc.join(STOP_TIMEOUT_S)
            if proc.is_alive():
                proc.kill()
                proc.join()
        for conn in self.conns + self._child_ends:
            conn.close()
