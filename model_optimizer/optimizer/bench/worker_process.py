"""One spawned `mopt bench --num-workers` process: its share of a run, and how it leaves stopping to the parent.

workers.py splits a plan into `WorkerTask`s and starts one process per task at `worker_main`. A
worker takes its task, reports ready, waits for the parent's start time, runs `run_closed` or
`run_open` on its share and sends its records back.

Only the parent decides when a worker stops. A worker ignores SIGINT and SIGTERM: a terminal's
Ctrl-C, `timeout` or `kill -TERM -PGID` signal the whole process group, and a worker ended by it
would take the records of the requests it finished with it. The parent, signalled as well, tells
each worker to stop through its pipe (`("stop", reason)`), the worker stops as one process does
(stopping.py: a grace, then the requests in flight are cancelled) and sends everything it measured.
The parent spawns workers with both signals blocked (`signals_held`), so one that comes while a
worker is still starting waits, and is dropped once the worker ignores it. A worker whose parent
is gone (killed) exits at once: never an orphan load.
"""

from __future__ import annotations

import asyncio
import contextlib
import multiprocessing
import multiprocessing.connection
import os
import signal
import threading
import time
import traceback
from collections.abc import Callable, Iterator
from dataclasses import dataclass

from model_optimizer.optimizer.bench.client import BenchClient, ClientConfig
from model_optimizer.optimizer.bench.load import RunPlan, run_closed, run_open
from model_optimizer.optimizer.bench.overhead import LoopLagMonitor, cancel_task
from model_optimizer.optimizer.bench.record import RequestRecord
from model_optimizer.optimizer.bench.stopping import RunStop
from model_optimizer.optimizer.bench.workloads import BenchRequest

PROGRESS_INTERVAL_S = 0.25
"""How often a worker reports its finished-request counts to the parent's progress bar."""
STOP_SIGNALS = {signal.SIGINT, signal.SIGTERM}
"""The signals the parent handles for its workers (stopping.signal_handlers)."""


@dataclass
class WorkerTask:
    """One worker's share of a run (sent to the spawned process through its pipe)."""

    index: int
    client: ClientConfig
    plan: RunPlan
    """The run's plan with this worker's share of the concurrency or of the in-flight cap."""
    requests: list[BenchRequest]
    bodies: list[bytes]
    arrivals: list[tuple[int, float]] | None
    """Open loop and trace: the (request index, send offset) pairs it owns; None in a closed loop."""


def ending(records: list[RequestRecord], stop: RunStop) -> dict:
    """How one process's share of a run ended: its requests, arrivals never sent, why it stopped early."""
    return {"num_requests": len(records), "num_unsent": stop.num_unsent, "stopped": stop.reason}


@contextlib.contextmanager
def signals_held() -> Iterator[None]:
    """Block SIGINT and SIGTERM in this thread meanwhile: a process spawned now inherits the mask, so a
    signal to the group waits (pending) until `worker_main` ignores it instead of killing the worker
    while it imports. This thread gets a signal that came meanwhile when the block ends."""
    previous = signal.pthread_sigmask(signal.SIG_BLOCK, STOP_SIGNALS)
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, previous)


def worker_main(conn: multiprocessing.connection.Connection, counter) -> None:
    """Entry point of a spawned worker: take its task, get ready, wait for the start, run, send the records."""
    for sig in STOP_SIGNALS:  # the parent stops us (module docstring); a pending one is dropped here
        signal.signal(sig, signal.SIG_IGN)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, STOP_SIGNALS)
    _exit_with_parent()
    try:
        task: WorkerTask = conn.recv()
        records, loop = asyncio.run(_work(task, conn, counter))
        conn.send(("done", records, loop))
    except (EOFError, BrokenPipeError):
        os._exit(1)  # the parent went away: nobody to report to
    except BaseException as exc:  # noqa: BLE001 - reported to the parent, which fails the run with it
        try:
            conn.send(("error", f"{type(exc).__name__}: {exc}", traceback.format_exc()))
        finally:
            os._exit(1)


def _exit_with_parent() -> None:
    """End this worker as soon as the parent process is gone (killed, crashed): never an orphan load."""
    parent = multiprocessing.parent_process()
    if parent is None or parent.sentinel is None:
        return

    def watch() -> None:
        multiprocessing.connection.wait([parent.sentinel])
        os._exit(1)

    threading.Thread(target=watch, name="mopt-bench-parent-watch", daemon=True).start()


async def _work(task: WorkerTask, conn, counter) -> tuple[list[RequestRecord], dict]:
    records: list[RequestRecord] = []
    counts = [0, 0, 0]  # finished ok, failed, output tokens since the last progress message

    def done(rec: RequestRecord) -> None:
        records.append(rec)
        counts[0 if rec.ok else 1] += 1
        counts[2] += rec.output_tokens if rec.ok else 0

    def flush() -> None:
        if any(counts):
            conn.send(("progress", *counts))
            counts[:] = [0, 0, 0]

    async def report() -> None:
        while True:
            await asyncio.sleep(PROGRESS_INTERVAL_S)
            flush()

    monitor = LoopLagMonitor()
    stop = RunStop()
    async with BenchClient(task.client, task.plan.slots(), 0.0, stop) as client:
        # httpx imports its transport (httpcore, h11, anyio's backend) on the first request: ~0.2 s that
        # would stall the loop after the start; the parent's process did it when it asked for the model
        import anyio._backends._asyncio  # noqa: F401
        import h11  # noqa: F401
        import httpcore  # noqa: F401

        conn.send(("ready", time.perf_counter(), time.time()))
        client.t0 = t0 = conn.recv()
        asyncio.get_running_loop().add_reader(conn.fileno(), _read_stop, conn, stop)
        await asyncio.sleep(max(0.0, t0 - time.perf_counter()))
        monitor.start()
        reporter = asyncio.create_task(report())
        if task.arrivals is None:
            await run_closed(client, task.plan, task.requests, task.bodies, _shared_next(counter), done)
        else:
            await run_open(client, task.plan, task.requests, task.bodies, task.arrivals, done)
        loop = await monitor.stop()
        await cancel_task(reporter)
        asyncio.get_running_loop().remove_reader(conn.fileno())
    flush()
    return sorted(records, key=lambda r: r.index), loop | ending(records, stop)


def _read_stop(conn, stop: RunStop) -> None:
    """The parent's ("stop", reason) message: stop this worker's share of the run."""
    try:
        while conn.poll():
            message = conn.recv()
            if message[0] == "stop":
                stop.stop(message[1])
    except (EOFError, OSError):  # the parent is gone: _exit_with_parent ends this process
        asyncio.get_running_loop().remove_reader(conn.fileno())


def _shared_next(counter) -> Callable[[], int]:
    """The next request index from the counter every worker of a closed loop shares."""

    def next_index() -> int:
        with counter.get_lock():
            i = counter.value
            counter.value = i + 1
        return i

    return next_index
