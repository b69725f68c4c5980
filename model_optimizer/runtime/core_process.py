"""The engine core in a process of its own: `mopt serve` starts it, its frontends talk to it over ZeroMQ.

`start_core(config)` spawns the process, which loads the model (and warms it up), binds its sockets
and reports ready, or the start-up error as the frontend's own exception (a ValueError stays a
one-line ValueError). `spawn_core` is its first half: `mopt serve` spawns the core before it sets up
its HTTP side and takes it with `CoreStart.ready()` once its own checks pass. Then it runs the CoreLoop (engine/core_loop.py) until a frontend sends SHUTDOWN,
its parent dies (it polls, common/processes.py) or a step fails (it sends the error to every frontend,
then exits non-zero). It ignores SIGINT: the frontend decides when to drain and stop it, so a Ctrl-C
to the whole process group never cuts a drain short. SIGTERM ends it at once while it loads (nothing
is in it yet); once it serves, the first SIGTERM is left to the frontend (a process group's SIGTERM
reaches the frontend too, which drains, then stops the core) and a second one ends it. Tensor-parallel
workers are its children and watch it the same way.

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
import sys
import tempfile
import threading
import time
import traceback
from collections.abc import Iterator
from dataclasses import dataclass, field
from multiprocessing.connection import Connection
from pathlib import Path
from typing import TYPE_CHECKING, Any

from model_optimizer.common.processes import exit_with_parent, freeze_startup_objects, unfreeze_objects
from model_optimizer.runtime.config import EngineConfig
from model_optimizer.runtime.cuda_context import create_in_background
from model_optimizer.runtime.engine.messages import (
    ControlOp,
    CoreControl,
    CoreOutputs,
    CoreRequest,
    decode_command,
    encode,
)
from model_optimizer.runtime.kernels.compile_cache import hash_triton_in_background
from model_optimizer.runtime.sampling_params import SamplingParams

if TYPE_CHECKING:  # the engine's modules (numpy, the scheduler, grammars) load in the core, not before its spawn
    from model_optimizer.runtime.engine.core import EngineCore, ModelInfo

logger = logging.getLogger(__name__)
STOP_TIMEOUT_S = 10.0
POLL_MS = 500
"""Longest wait for a command when there is no step to run."""


class CoreStartupError(RuntimeError):
    """The engine core failed to start for a reason that is not the user's mistake (its traceback is logged)."""


@dataclass(frozen=True)
class CoreSpec:
    """What the core process needs (pickled into it)."""

    config: EngineConfig
    input_address: str
    output_addresses: list[str]
    parent_pid: int
    log_levels: tuple[tuple[str, int], ...] = ()


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


# ----------------------------------------------------------------------------------- in the core process
def run_core(spec: CoreSpec, conn: Connection) -> None:
    """Entry point of the core process."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the frontend drains, then stops us
    signal.signal(signal.SIGTERM, signal.SIG_DFL)  # while it loads: nothing to drain, SIGTERM ends it
    exit_with_parent(spec.parent_pid)
    _configure_logging(spec.log_levels)
    if spec.config.device != "cpu":  # rank 0 drives GPU 0; its context and Triton's key are made while
        create_in_background(0)  # _load imports torch
        hash_triton_in_background()
    try:
        core, extra = _load(spec.config, len(spec.output_addresses))
    except BaseException as exc:  # noqa: BLE001 - whatever failed, the frontend raises it with this text
        _send_quietly(conn, ("error", (type(exc).__name__, str(exc), traceback.format_exc())))
        sys.exit(2 if isinstance(exc, ValueError) else 1)
    import zmq

    context = zmq.Context()
    inbox = context.socket(zmq.PULL)
    inbox.bind(spec.input_address)
    outboxes = []
    for address in spec.output_addresses:
        sock = context.socket(zmq.PUSH)
        sock.setsockopt(zmq.SNDHWM, 0)  # a slow frontend must never block the step loop
        sock.setsockopt(zmq.LINGER, 2000)  # the last outputs (an error) still reach it as the process ends
        sock.bind(address)
        outboxes.append(sock)
    watch = getattr(core.runner, "on_worker_death", None)
    if watch is not None:  # a tensor-parallel worker that dies while no step runs fails the core at once
        watch(lambda exc: _inject_failure(context, spec.input_address, exc))
    signal.signal(signal.SIGTERM, _on_sigterm_while_serving)
    _send_quietly(conn, ("ready", {"info": core.info, "extra": extra}))
    conn.close()
    freeze_startup_objects()
    code = _serve(core, inbox, outboxes)
    unfreeze_objects()
    core.close()
    for sock in (inbox, *outboxes):
        sock.close()
    context.term()
    sys.exit(code)


def _load(config: EngineConfig, num_clients: int) -> tuple[EngineCore, dict]:
    """The model loaded and warmed up behind an EngineCore, each start-up phase logged as `LLM` logs it
    (the frontends tokenize; the core only needs the tokenizer's EOS id when the folder names none)."""
    start = time.perf_counter()
    import model_optimizer.runtime.runner.model_runner  # noqa: F401 - torch, as LLM's `imports` phase counts it
    from model_optimizer.runtime.engine.core import EngineCore
    from model_optimizer.runtime.hub import resolve_model_dir
    from model_optimizer.runtime.kernels.compile_cache import configure_compile
    from model_optimizer.runtime.models.tokenizer import load_tokenizer
    from model_optimizer.runtime.startup import load_runner, log_phase

    phase = log_phase("imports", start)
    configure_compile(config)
    model_dir = resolve_model_dir(config.model, config.revision)
    phase = log_phase("config", phase)
    tokenizer = (
        None
        if config.skip_tokenizer_init
        else load_tokenizer(Path(config.tokenizer) if config.tokenizer else model_dir, required=False)
    )
    log_phase("tokenizer", phase)
    runner, info = load_runner(config, model_dir, tokenizer)  # logs weights, KV cache, warm-up, graph capture
    phase = time.perf_counter()
    core = EngineCore(config, runner, info, num_clients, tokenizer=tokenizer)
    core.add_request(CoreRequest("warm-up", [1, 2, 3], SamplingParams(max_tokens=2, temperature=0.0), 2))
    while core.has_unfinished_requests():  # the first requests' path, so no user pays for it
        core.step()
    _reset_counters(core)
    log_phase("engine", phase)
    log_phase("total", start)
    model = getattr(runner, "model", None)
    if model is not None:  # a quantized linear counts as the weight it stands for
        from model_optimizer.runtime.layers.quantization.summary import summarize_weights

        summary = summarize_weights(model)
        extra = {"num_params": summary.num_params, "weights": summary.describe()}
    else:  # tensor parallel: rank 0 summarized its shard's model the same way
        extra = {"num_params": runner.info.get("num_params", 0), "weights": runner.info.get("weights", "?")}
    return core, extra


def _reset_counters(core: EngineCore) -> None:
    """Zero the since-start counters the warm-up moved, so /metrics counts only what clients sent: the core's
    tokens and steps, the prefix cache's lookups and hits, speculative decoding's proposals."""
    from model_optimizer.runtime.engine.kv_cache import PrefixCacheStats
    from model_optimizer.runtime.spec_decode.counters import SpecCounters

    core.num_prompt_tokens = core.num_generation_tokens = core.num_steps = 0
    core.kv_cache.stats = PrefixCacheStats()
    core.scheduler.spec_counters = SpecCounters()


def _serve(core: EngineCore, inbox: Any, outboxes: list[Any]) -> int:
    """The core loop over sockets; returns the exit code (0 after SHUTDOWN, 1 after a failure)."""
    import zmq

    from model_optimizer.runtime.engine.core_loop import CoreLoop, CoreStopped
    from model_optimizer.runtime.engine.step_gate import StepGate

    lock = threading.Lock()
    gate = StepGate(lock, threading.Condition(lock))

    def publish(outputs: list[CoreOutputs]) -> None:
        for sock, out in zip(outboxes, outputs):
            try:  # never blocks: a frontend that is not connected yet asks for the stats when it is
                sock.send(encode(out), zmq.NOBLOCK)
            except zmq.Again:
                pass

    loop = CoreLoop(core, gate, publish)
    poller = zmq.Poller()
    poller.register(inbox, zmq.POLLIN)
    try:
        while True:
            may_step = loop.has_work and gate._may_step()
            if poller.poll(0 if may_step else POLL_MS):
                loop.apply(_drain(inbox))
            if loop.has_work and gate._pass():
                loop.step()
            else:
                loop.flush()
    except CoreStopped:
        return 0
    except BaseException as exc:  # noqa: BLE001 - every frontend must hear of it before the process ends
        logger.exception("engine core failed")
        message = f"{type(exc).__name__}: {exc}"
        for sock in outboxes:
            out = CoreOutputs([], b"", b"", b"", b"", error=message)
            try:
                sock.send(encode(out), zmq.NOBLOCK)
            except zmq.Again:
                pass
        return 1


def _on_sigterm_while_serving(signum: int, frame: Any) -> None:
    """The first SIGTERM is left to the frontend: a process group's SIGTERM (a service manager's stop)
    reaches it too, and it drains, then stops the core. A second one ends the core at once: the default
    action is back before the line that says so, so a SIGTERM sent on reading it is never caught again."""
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    logger.info("SIGTERM: the frontend drains and stops the engine core; a second SIGTERM ends it now")


def _drain(inbox: Any) -> list:
    import zmq

    commands = []
    while True:
        try:
            commands.append(decode_command(inbox.recv(zmq.NOBLOCK)))
        except zmq.Again:
            return commands


def _inject_failure(context: Any, address: str, exc: BaseException) -> None:
    """From the TP watchdog thread: put a FAIL command in the core's own inbox."""
    import zmq

    sock = context.socket(zmq.PUSH)
    sock.setsockopt(zmq.LINGER, 1000)
    sock.connect(address)
    sock.send(encode(CoreControl(ControlOp.FAIL, arg=str(exc))))
    sock.close()


def _configure_logging(levels: tuple[tuple[str, int], ...]) -> None:
    """A spawned process starts without the frontend's logging set-up: lines to stderr, tagged `core`."""
    handler = logging.StreamHandler()
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s core %(name)s: %(message)s"))
    top = logging.getLogger("model_optimizer")
    top.addHandler(handler)
    top.propagate = False
    for name, level in levels:
        logging.getLogger(name).setLevel(level)


def _send_quietly(conn: Connection, message: Any) -> None:
    try:
        conn.send(message)
    except (OSError, ValueError):
        pass  # the frontend is gone


__all__ = ["CoreConnection", "CoreHandle", "CoreStartupError", "run_core", "start_core"]
