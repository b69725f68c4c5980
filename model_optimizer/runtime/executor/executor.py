"""TensorParallelExecutor: the engine's StepRunner when the model is split over worker processes.

The driver (engine, scheduler, block pool, tokenizer, server) stays in this process, which never
joins the group and never touches a GPU for the model. Each `launch` pickles the SchedulerOutput
once and sends the same bytes to every worker, saying whether a step is pending; each `collect`
asks them to collect the oldest launched step, and rank 0 replies with the sampled tokens. The
workers keep their own queue of launched steps, so the engine's asynchronous pipeline (engine.py)
runs unchanged on every rank.

Waiting for a reply also watches every worker's process sentinel: a worker that dies fails the step
with a RuntimeError naming its rank and exit code instead of hanging the driver, and all workers are
reaped. Workers are reaped on close(), at interpreter exit, and, when this process dies without
either (SIGTERM, kill -9), by themselves (see worker.py).
"""

from __future__ import annotations

import atexit
import logging
import os
import pickle
import shutil
import tempfile
import threading
import weakref
from collections import deque
from collections.abc import Callable
from multiprocessing.connection import Connection, wait
from pathlib import Path
from typing import Any

from model_optimizer.runtime.config import EngineConfig
from model_optimizer.runtime.engine.request import Logprob
from model_optimizer.runtime.engine.scheduler_output import SchedulerOutput
from model_optimizer.runtime.executor.worker import (
    CLOSE,
    COLLECT,
    FORWARD,
    FORWARD_PENDING,
    LAUNCH,
    LAUNCH_PENDING,
    MULTICAST_OFF,
    PREPARE,
    PREPARE_PENDING,
    PROFILE_START,
    PROFILE_STOP,
    SAMPLE,
    SUBMIT,
    WorkerSpec,
    worker_main,
)
from model_optimizer.runtime.structured.manager import HostTokenMask

log = logging.getLogger(__name__)

LOGGERS = ("model_optimizer", "model_optimizer.startup")
"""Loggers whose level the workers take from the driver."""

REAP_TIMEOUT_S = 10.0
PEER_DEATH_GRACE_S = 2.0
"""After rank 0 reports an error, how long to look for a dead peer that caused it."""
"""How long a worker may take to leave after close (or terminate) before it is killed."""


class WorkerError(RuntimeError):
    """A tensor-parallel worker failed or died; the executor is unusable afterwards."""


def check_tensor_parallel(config: EngineConfig, model_dir: Path) -> None:
    """ValueError before any process starts: a checkpoint that does not split (models/loader.py says
    why), or more ranks than visible GPUs."""
    size = config.tensor_parallel_size
    if size == 1:
        return
    from model_optimizer.runtime.models.loader import check_tensor_parallel as check_checkpoint

    check_checkpoint(model_dir, size, config.quantization, config.load_format)
    import torch

    if config.device != "cpu" and torch.cuda.is_available():
        visible = torch.cuda.device_count()
        if size > visible:
            raise ValueError(f"tensor_parallel_size {size} needs {size} GPUs; this process sees {visible}")


class TensorParallelExecutor:
    """Starts `tensor_parallel_size` workers and runs the engine's steps on them (see module docstring)."""

    def __init__(self, config: EngineConfig, model_dir: str | Path) -> None:
        model_dir = Path(model_dir)
        check_tensor_parallel(config, model_dir)
        import torch.multiprocessing as mp

        for key, value in MULTICAST_OFF.items():  # the workers' environment is copied from here at spawn
            os.environ.setdefault(key, value)
        self.size = config.tensor_parallel_size
        if config.device == "cpu" or (config.device == "auto" and not _cuda_available()):
            from model_optimizer.environment.cpu_speed import cpu_speed

            cpu_speed()  # measured here once, before the ranks start, so they read it instead of racing to measure
        self._tmp = tempfile.mkdtemp(prefix="mopt-tp-")  # the group meets through a file: no TCP port to pick
        init_method = f"file://{Path(self._tmp) / 'rendezvous'}"
        ctx = mp.get_context("spawn")
        log_levels = tuple((n, logging.getLogger(n).getEffectiveLevel()) for n in LOGGERS)
        self._conns: list[Connection] = []
        self._procs: list[Any] = []
        self._closed = False
        self._stopping = threading.Event()
        """Set by close(): the death watcher (on_worker_death) stays silent from then on."""
        self._launched: deque[int] = deque()
        self._next_step = 0
        # reaps the workers at close(), when this object is collected, or at interpreter exit; registered
        # here, after multiprocessing's own exit hook, so it runs first (that hook joins live children)
        self._reaper = weakref.finalize(self, _reap, self._procs, self._conns, self._tmp)
        atexit.register(self._reaper)  # calling a finalizer twice is a no-op
        try:
            for rank in range(self.size):
                mine, theirs = ctx.Pipe()
                proc = ctx.Process(
                    target=worker_main,
                    args=(WorkerSpec(rank, config, model_dir, init_method, os.getpid(), log_levels), theirs),
                    name=f"mopt-tp-rank{rank}",
                )
                proc.start()
                theirs.close()  # only the worker holds its end now: its death is EOF here
                self._conns.append(mine)
                self._procs.append(proc)
                log.info("tensor-parallel worker rank %d: pid %d", rank, proc.pid)
            self.info = self._wait_ready()
        except BaseException:
            self.close()
            raise

    @property
    def worker_pids(self) -> list[int]:
        return [p.pid for p in self._procs]

    @property
    def device_type(self) -> str:
        """Where the workers run the model: "cuda" unless the config says cpu (gloo ranks)."""
        return self.info.get("device_type", "cpu")

    @property
    def vocab_size(self) -> int:
        return self.info["vocab_size"]

    @property
    def max_model_len(self) -> int:
        return self.info["max_model_len"]

    @property
    def num_kv_blocks(self) -> int:
        return self.info["num_kv_blocks"]

    @property
    def num_host_kv_blocks(self) -> int:
        return self.info["num_host_kv_blocks"]

    def _wait_ready(self) -> dict:
        """Rank 0's ready report once every rank has sent one; a start-up failure raised as the worker's own."""
        ready: dict[int, dict] = {}
        while len(ready) < self.size:
            waiting = [c for r, c in enumerate(self._conns) if r not in ready]
            for conn in wait(waiting + [p.sentinel for r, p in enumerate(self._procs) if r not in ready]):
                rank = self._rank_of(conn)
                status, value = self._receive(rank)
                if status == "error":
                    raise _startup_error(rank, *value)
                ready[rank] = value
        return ready[0]

    def _rank_of(self, ready: Any) -> int:
        for rank, (conn, proc) in enumerate(zip(self._conns, self._procs)):
            if ready is conn or ready == proc.sentinel:
                return rank
        raise RuntimeError(f"unknown waitable {ready!r}")

    def _receive(self, rank: int) -> tuple[str, Any]:
        """The next message of `rank`, or WorkerError when it died (with its last words, if it sent any)."""
        conn, proc = self._conns[rank], self._procs[rank]
        try:
            if conn.poll():
                return conn.recv()
        except (EOFError, OSError):
            pass
        proc.join(REAP_TIMEOUT_S)
        raise self._fail(WorkerError(f"tensor-parallel worker rank {rank} died (exit code {proc.exitcode})"))

    def _fail(self, exc: WorkerError) -> WorkerError:
        log.error("%s; stopping every worker", exc)
        self.close(graceful=False)  # the others may wait forever in a collective with the dead one
        return exc

    # ----------------------------------------------------------------- StepRunner
    def launch(self, scheduler_output: SchedulerOutput, pending: int | None = None, sample: bool = True) -> int:
        """Send the step to every worker (the same pickled bytes); return its handle, a step number.
        With `sample` False the workers queue its forward only, until `sample`."""
        self._check_open()
        self._check_newest(pending)
        if sample:
            kind = LAUNCH_PENDING if pending is not None else LAUNCH
        else:
            kind = FORWARD_PENDING if pending is not None else FORWARD
        self._send(kind + pickle.dumps(scheduler_output, protocol=pickle.HIGHEST_PROTOCOL))
        handle, self._next_step = self._next_step, self._next_step + 1
        self._launched.append(handle)
        return handle

    def prepare(self, scheduler_output: SchedulerOutput, pending: int | None = None) -> SchedulerOutput:
        """Have every worker write the step's inputs (ModelRunner.prepare) while the driver waits for the
        newest step's masks; `submit` queues its forward. Returns what `submit` takes."""
        self._check_open()
        self._check_newest(pending)
        kind = PREPARE_PENDING if pending is not None else PREPARE
        self._send(kind + pickle.dumps(scheduler_output, protocol=pickle.HIGHEST_PROTOCOL))
        return scheduler_output

    def submit(self, prepared: SchedulerOutput, pending: int | None, sample: bool = True) -> int:
        """Queue the forward of the step `prepare` sent (and its sampling unless `sample` is False);
        return its handle. `pending`: the handle it was prepared with, if any."""
        self._check_open()
        self._check_newest(pending)
        self._send(SUBMIT + (b"1" if sample else b"0"))
        handle, self._next_step = self._next_step, self._next_step + 1
        self._launched.append(handle)
        return handle

    def _check_newest(self, pending: int | None) -> None:
        if pending is not None and (not self._launched or pending != self._launched[-1]):
            raise RuntimeError(f"pending step {pending} is not the newest launched one")

    def sample(self, handle: int, mask: HostTokenMask | None) -> int:
        """Queue the sampling of the newest step, launched with sample=False; the masks go to rank 0,
        which samples for every rank."""
        self._check_open()
        if not self._launched or handle != self._launched[-1]:
            raise RuntimeError(f"step {handle} is not the newest launched one; only it can be sampled")
        none = SAMPLE + pickle.dumps(None)
        for rank, conn in enumerate(self._conns):
            message = SAMPLE + pickle.dumps(mask, protocol=pickle.HIGHEST_PROTOCOL) if rank == 0 else none
            try:
                conn.send_bytes(message)
            except OSError:
                self._receive(rank)
                raise self._fail(WorkerError(f"tensor-parallel worker rank {rank} stopped reading")) from None
        return handle

    def collect(self, handle: int) -> dict[str, tuple[int, Logprob | None]]:
        """Have every worker collect the oldest launched step; rank 0's sampled tokens."""
        self._check_open()
        if not self._launched or handle != self._launched[0]:
            raise RuntimeError(f"step {handle} is not the oldest launched one; steps are collected in launch order")
        self._launched.popleft()
        self._send(COLLECT)
        return self._reply()

    def on_worker_death(self, callback: Callable[[BaseException], None]) -> None:
        """Call `callback` from a watcher thread when a worker dies before close(), also while no step
        runs: an idle server reports unhealthy at once rather than at its next request."""
        args = (self._procs, self._stopping, callback)  # not self: the thread must not keep it alive
        threading.Thread(target=_watch, args=args, name="mopt-tp-watch", daemon=True).start()

    def start_profile(self) -> None:
        """Benchmarks: rank 0 starts recording device kernels of the steps collected from now on."""
        self._check_open()
        self._send(PROFILE_START)

    def stop_profile(self, trace_path: str | None = None) -> dict:
        """Stop rank 0's profile; its per-step kernel summary (executor/step_profile.py), and a Chrome
        trace written by rank 0 at `trace_path` when given."""
        self._check_open()
        self._send(PROFILE_STOP + (trace_path or "").encode())
        return self._reply()

    def _send(self, message: bytes) -> None:
        for rank, conn in enumerate(self._conns):
            try:
                conn.send_bytes(message)
            except OSError:
                self._receive(rank)  # raises, with the worker's own error when it sent one
                raise self._fail(WorkerError(f"tensor-parallel worker rank {rank} stopped reading")) from None

    def _reply(self) -> dict:
        """Rank 0's reply, watching every worker: one that dies first fails the step (no hang)."""
        ready = wait([self._conns[0]] + [p.sentinel for p in self._procs])
        if self._conns[0] not in ready:
            dead = min(self._rank_of(r) for r in ready)
            self._receive(dead)  # raises WorkerError
        status, value = self._receive(0)
        if status == "error":
            name, message, text = value
            # rank 0 failed in a collective because a peer died: give the kernel a moment to report the
            # death (a SIGKILLed peer's sentinel may lag rank 0's error), so the cause is named, not rank 0
            wait([p.sentinel for p in self._procs[1:]], timeout=PEER_DEATH_GRACE_S)
            for rank, proc in enumerate(self._procs):
                if rank and not proc.is_alive():  # rank 0 failed in a collective because this one had died: the cause
                    raise self._fail(
                        WorkerError(f"tensor-parallel worker rank {rank} died (exit code {proc.exitcode})")
                    )
            raise self._fail(WorkerError(f"tensor-parallel worker rank 0 failed: {name}: {message}\n{text}"))
        return value

    def _check_open(self) -> None:
        if self._closed:
            raise WorkerError("the tensor-parallel workers are stopped (closed, or one failed)")

    # ----------------------------------------------------------------- shutdown
    def close(self, graceful: bool = True) -> None:
        """Stop every worker and remove the rendezvous folder: a close message first when `graceful`
        (each leaves the group cleanly), else SIGTERM at once (a dead peer may hold the others in a
        collective forever); SIGKILL for one that does not leave in time."""
        if self._closed:
            return
        self._closed = True
        self._stopping.set()
        if not graceful:
            for proc in self._procs:
                proc.terminate()
        self._reaper()


def _reap(procs: list[Any], conns: list[Connection], tmp: str) -> None:
    for conn in conns:
        try:
            conn.send_bytes(CLOSE)
        except OSError:
            pass  # that worker is gone already
    for proc in procs:
        proc.join(REAP_TIMEOUT_S)
        if proc.is_alive():  # stuck in a collective with a dead peer, say
            proc.terminate()
            proc.join(REAP_TIMEOUT_S)
        if proc.is_alive():
            proc.kill()
            proc.join()
    for conn in conns:
        conn.close()
    shutil.rmtree(tmp, ignore_errors=True)


def _watch(procs: list[Any], stopping: threading.Event, callback: Callable[[BaseException], None]) -> None:
    """Wait for any worker to exit; unless close() began, report it through `callback`."""
    ready = wait([p.sentinel for p in procs])
    if stopping.is_set():
        return
    rank = next(r for r, p in enumerate(procs) if p.sentinel in ready)
    procs[rank].join(1.0)
    callback(WorkerError(f"tensor-parallel worker rank {rank} died (exit code {procs[rank].exitcode})"))


def _startup_error(rank: int, name: str, message: str, text: str) -> BaseException:
    """A worker's start-up failure as the driver's own: ValueError stays ValueError (a user's mistake,
    shown without a traceback by the CLI and the server), anything else a WorkerError with its traceback."""
    if name == "ValueError":
        return ValueError(message)
    log.error("tensor-parallel worker rank %d failed at start-up:\n%s", rank, text)
    return WorkerError(f"tensor-parallel worker rank {rank} failed at start-up: {name}: {message}\n{text}")


def _cuda_available() -> bool:
    import torch

    return torch.cuda.is_available()
