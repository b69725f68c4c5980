"""The engine core in a process of its own: `mopt serve` starts it, its frontends talk to it over ZeroMQ.

`start_core(config)` spawns the process, which loads the model (and warms it up), binds its sockets
and reports ready (core_main.py runs in it), or the start-up error as the frontend's own exception (a ValueError stays a
one-line ValueError). `spawn_core` is its first half: `mopt serve` spawns the core before it sets up
its HTTP side and takes it with `CoreStart.ready()` once its own checks pass. Then it runs the CoreLoop (engine/core_loop.py) until a frontend sends SHUTDOWN,
its parent dies (it polls, common/processes.py) or a step fails (it sends the error to every frontend,
then exits non-zero). The frontend alone decides when to drain and stop it: a terminal's Ctrl-C and
`kill -TERM -PGID` reach every process of the group, as many times as they are sent, and the frontend's
second signal aborts and answers its requests (finish_reason "abort"), which a core that had died of the
same signal would have failed with an error instead. So it ignores
SIGINT, and SIGTERM once it serves (while it loads, SIGTERM ends it: nothing is in it yet). A signal
cannot say whether it was sent to the group or to the core alone, so a SIGTERM to the core's own pid is
ignored too; SIGKILL ends it alone (its frontend then fails the requests it held and exits non-zero).
Tensor-parallel workers are its children and watch it the same way. A core that stops answering (it
hangs) is caught by its frontends' HangWatch (engine/hang_watch.py).

The frontend stops the core whatever ends it, a Ctrl-C at any point of the start-up included: the
exit hook that stops the core is registered before the core is spawned (a core never handed over is
killed: it is still loading, or no one will ever talk to it), and a Ctrl-C that comes while the spawn
itself runs is held until the core is there to be stopped.
"""

from __future__ import annotations

import atexit
import contextlib
import functools
import logging
import multiprocessing
import multiprocessing.util  # its exit hook (join every child) is registered before ours, so ours runs first
import os
import shutil
import signal
import tempfile
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from multiprocessing.connection import Connection
from typing import TYPE_CHECKING, Any

from model_optimizer.runtime.config import EngineConfig
from model_optimizer.runtime.core_main import CoreSpec, run_core
from model_optimizer.runtime.engine.messages import ControlOp, CoreControl, encode

if TYPE_CHECKING:  # the engine's modules (numpy, the scheduler, grammars) load in the core, not before its spawn
    from model_optimizer.runtime.engine.core import ModelInfo

logger = logging.getLogger(__name__)
STOP_TIMEOUT_S = 10.0


class CoreStartupError(RuntimeError):
    """The engine core failed to start for a reason that is not the user's mistake (its traceback is logged)."""


@dataclass
class CoreHandle:
    """The frontend's view of a started core process."""

    process: Any
    input_address: str
    output_addresses: list[str]
    info: ModelInfo
    config: EngineConfig
    extra: dict = field(default_factory=dict)
    """What the core reported besides ModelInfo: parameter count and dtype (for the start-up log)."""
    tmpdir: str = ""
    owner_pid: int = field(default_factory=os.getpid)
    """The process that started the core (a forked child inherits the exit hook, never the core)."""
    serving: bool = False
    """The core reported ready: it reads SHUTDOWN from its socket. Before that it is loading (or failed
    to): nothing is in it, and it would never read a SHUTDOWN, so `stop` kills it."""

    @property
    def sentinel(self) -> int:
        return self.process.sentinel

    @property
    def pid(self) -> int:
        return self.process.pid

    def exitcode(self) -> int | None:
        self.process.join(1.0)
        return self.process.exitcode

    def stop(self, input_socket: Any = None, timeout: float = STOP_TIMEOUT_S) -> None:
        """Ask the core to stop (abort everything, release the GPU), then make sure it has. Without
        `input_socket` (no frontend connected: the program is exiting) a socket of its own asks. A core
        that is not serving yet is killed at once; so is one that has not stopped within `timeout`, or
        whose stop a Ctrl-C interrupts."""
        if self.process.pid is not None:  # spawned (the exit hook is registered before the spawn)
            try:
                if not self.serving:
                    self.process.kill()
                elif self.process.is_alive():
                    self._send_shutdown(input_socket)
                self.process.join(timeout)
            finally:  # a KeyboardInterrupt in the wait above must not leave it running
                if self.process.is_alive():
                    self.process.kill()
                    self.process.join()
        shutil.rmtree(self.tmpdir, ignore_errors=True)
        atexit.unregister(self._stop_at_exit)  # last: a stop cut short is finished at exit

    def _stop_at_exit(self) -> None:
        if os.getpid() == self.owner_pid:
            self.stop()

    def _send_shutdown(self, input_socket: Any) -> None:
        import zmq

        context = None
        if input_socket is None:
            context = zmq.Context()
            input_socket = context.socket(zmq.PUSH)
            input_socket.setsockopt(zmq.LINGER, 1000)  # the command leaves before the socket closes
            input_socket.connect(self.input_address)
        try:
            input_socket.send(encode(CoreControl(ControlOp.SHUTDOWN)), zmq.NOBLOCK)
        except zmq.ZMQError:
            pass  # the join below and, failing that, SIGKILL still end it
        if context is not None:
            input_socket.close()
            context.term()


@dataclass(frozen=True)
class CoreConnection:
    """How another frontend process (--api-server-count) reaches a core it did not start: it can watch the
    core (a pidfd: no waitpid for a process that is not its child) but never stops it."""

    pid: int
    input_address: str
    output_addresses: list[str]
    info: ModelInfo
    config: EngineConfig
    extra: dict

    @classmethod
    def of(cls, handle: CoreHandle) -> CoreConnection:
        return cls(handle.pid, handle.input_address, handle.output_addresses, handle.info, handle.config, handle.extra)

    @functools.cached_property
    def sentinel(self) -> int:
        """Readable once the core process has ended (Linux pidfd)."""
        return os.pidfd_open(self.pid)

    def exitcode(self) -> int | None:
        return None  # not this process's child: its exit code is its parent's to read

    def stop(self, input_socket: Any = None, timeout: float = STOP_TIMEOUT_S) -> None:
        """Nothing: the frontend that started the core stops it."""


def start_core(config: EngineConfig, num_clients: int = 1) -> CoreHandle:
    """Spawn the engine core for `config` and wait until it is ready (or raise what stopped it)."""
    return spawn_core(config, num_clients).ready()


def spawn_core(config: EngineConfig, num_clients: int = 1, log_level: int | None = None) -> CoreStart:
    """Spawn the engine core for `config` and return at once: it imports, loads and warms up while the
    caller goes on (`mopt serve` sets up its HTTP side meanwhile); `CoreStart.ready()` waits for it.
    `log_level`: the level (a number) the caller's logging will have (default: what it has now)."""
    tmpdir = tempfile.mkdtemp(prefix="mopt-core-")
    names = ("model_optimizer", "model_optimizer.startup")
    levels = tuple(
        (name, logging.getLogger(name).getEffectiveLevel() if log_level is None else log_level) for name in names
    )
    spec = CoreSpec(
        config=config,
        input_address=f"ipc://{tmpdir}/in",
        output_addresses=[f"ipc://{tmpdir}/out{i}" for i in range(num_clients)],
        parent_pid=os.getpid(),
        log_levels=levels,
    )
    ctx = multiprocessing.get_context("spawn")  # CUDA cannot live through a fork
    mine, theirs = ctx.Pipe()
    process = ctx.Process(target=run_core, args=(spec, theirs), name="mopt-engine-core")
    info: Any = None  # a placeholder, made below once engine.core is imported (while the core starts)
    handle = CoreHandle(process, spec.input_address, spec.output_addresses, info, config, tmpdir=tmpdir)
    start = CoreStart(handle, mine)
    # The core ignores SIGINT and is not a daemon (its tensor-parallel workers are its children), so
    # multiprocessing's own exit hook would wait for it forever: a program that started a core and never
    # stopped it (a script that built the app and ended; `mopt serve` interrupted by a Ctrl-C before it
    # held the CoreStart) would hang at exit. This hook, registered later, runs first and stops it; it is
    # registered before the spawn, so no Ctrl-C can land between the two.
    atexit.register(handle._stop_at_exit)
    try:
        with _sigint_held():  # a Ctrl-C inside start() could leave a core that no one knows of
            process.start()
        theirs.close()  # only the core holds its end now: its death is EOF here
        from model_optimizer.runtime.engine.core import ModelInfo  # while the core starts

        handle.info = ModelInfo(0, 0, frozenset(), 0)
    except BaseException:
        start.abandon()
        theirs.close()
        raise
    return start


@contextlib.contextmanager
def _sigint_held() -> Iterator[None]:
    """SIGINT held off (in the main thread, where Python handles it) until the block ends, then raised as
    it would have been: the block runs whole or not at all."""
    if threading.current_thread() is not threading.main_thread() or signal.getsignal(signal.SIGINT) is None:
        yield  # no handler of Python's to hold (None: one set from C, which could not be put back)
        return
    caught: list[int] = []
    previous = signal.signal(signal.SIGINT, lambda signum, frame: caught.append(signum))
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)
        if caught:
            if callable(previous):
                previous(signal.SIGINT, None)  # Python's own handler raises KeyboardInterrupt here
            elif previous == signal.SIG_DFL:
                signal.raise_signal(signal.SIGINT)


@dataclass
class CoreStart:
    """A core spawned by `spawn_core` and still starting: `ready()` hands it over once, `abandon()` stops
    it if nobody took it (the caller failed before it needed the core)."""

    handle: CoreHandle
    conn: Connection
    taken: bool = False

    def ready(self) -> CoreHandle:
        """The core once it is ready; raises what stopped it (ValueError for a configuration it refused)."""
        if self.taken:
            raise RuntimeError("this engine core was already handed over")
        self.taken = True
        handle = self.handle
        try:
            status, value = _wait_ready(self.conn, handle.process)
            if status == "error":
                handle.process.join(STOP_TIMEOUT_S)  # it exits once it has sent its error
                raise _startup_error(*value)
            handle.info, handle.extra = value["info"], value["extra"]
            handle.serving = True
        except BaseException:  # an error it reported, its death, or a Ctrl-C while it loads
            handle.stop()
            raise
        finally:
            self.conn.close()
        logger.info("engine core: pid %d", handle.pid)
        return handle

    def abandon(self) -> None:
        """Kill the core unless `ready()` handed it over: it is still loading, or ready with no frontend
        (no request can be in it); its tensor-parallel workers follow their parent out."""
        if not self.taken:
            self.taken = True
            self.conn.close()
            self.handle.stop()  # not serving: killed


def _wait_ready(conn: Connection, process: Any) -> tuple[str, Any]:
    from multiprocessing.connection import wait

    while True:
        wait([conn, process.sentinel])
        try:
            if conn.poll():
                return conn.recv()
        except (EOFError, OSError):
            pass
        if not process.is_alive():
            process.join()
            raise CoreStartupError(f"the engine core process exited during start-up (exit code {process.exitcode})")


def _startup_error(name: str, message: str, text: str) -> BaseException:
    """ValueError and FileNotFoundError stay what they are (a user's mistake, shown as one line by `mopt`);
    anything else is a CoreStartupError, its traceback logged."""
    if name == "ValueError":
        return ValueError(message)
    if name == "FileNotFoundError":
        return FileNotFoundError(message)
    logger.error("engine core failed at start-up:\n%s", text)
    return CoreStartupError(f"engine core failed at start-up: {name}: {message}")


__all__ = ["CoreConnection", "CoreHandle", "CoreStartupError", "start_core"]
