"""How a frontend reaches its engine core: in a thread of this process, or in a process of its own.

Both clients take CoreCommands (`send`) and deliver each CoreOutputs to the frontend's callback on
its event loop, so the frontend (async_engine.py) is the same code either way:

- `InprocClient`: a thread runs the CoreLoop over an EngineCore of this process (the server of a
  Python program that built an `LLM`, and tests, which hold its StepGate to freeze the engine).
- `ProcessClient`: the core runs in its own process (core_process.py; `mopt serve`), so its
  scheduling and input preparation never wait for the GIL behind HTTP and detokenizing. Commands
  and outputs travel as msgpack (engine/messages.py) over ZeroMQ IPC sockets: one PULL socket at
  the core for every frontend's commands, one PUSH socket per frontend for its outputs. The event
  loop reads outputs without a thread (a reader on the socket's descriptor, drained each time), and
  watches the process itself: ZeroMQ never says that a peer died, the process sentinel does; nor
  that it stopped answering: a HangWatch (hang_watch.py) pings a silent core.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import threading
from collections.abc import Callable
from typing import Any, Protocol

from model_optimizer.runtime.engine.core_loop import CoreLoop, CoreStopped
from model_optimizer.runtime.engine.hang_watch import HangWatch, hang_timeout_s
from model_optimizer.runtime.engine.messages import (
    ControlOp,
    CoreCommand,
    CoreControl,
    CoreOutputs,
    EngineStats,
    decode_outputs,
    encode,
)
from model_optimizer.runtime.engine.step_gate import StepGate

logger = logging.getLogger(__name__)

OnOutputs = Callable[[CoreOutputs], None]
OnFailure = Callable[[BaseException], None]


class EngineDeadError(RuntimeError):
    """The engine core has failed (or its process has gone); no request can be served any more."""


class _Answers:
    """CoreControl commands waiting for the core's answer, on the event loop: each carries a token that comes
    back in CoreOutputs.acks once the core has applied it (and in `declined` when its answer is False)."""

    def __init__(self) -> None:
        self._tokens = itertools.count(1)
        self._waiting: dict[int, asyncio.Future] = {}

    async def call(self, send: Callable[[CoreCommand], None], op: ControlOp, client: int = 0) -> bool:
        """Send `op` and wait for the core's answer: False when it did only part of it (CoreOutputs.declined)."""
        token = next(self._tokens)
        future = asyncio.get_running_loop().create_future()
        self._waiting[token] = future
        send(CoreControl(op, token, client=client))
        return await future

    def answer(self, out: CoreOutputs) -> None:
        for token in out.acks:
            future = self._waiting.pop(token, None)
            if future is not None and not future.done():
                future.set_result(token not in out.declined)

    def fail(self, exc: BaseException) -> None:
        """The core is gone: no answer will come."""
        for future in self._waiting.values():
            if not future.done():
                future.set_exception(exc)
        self._waiting.clear()


class CoreClient(Protocol):
    stats: EngineStats | None
    """The core's latest stats, as of the last outputs delivered (the in-process client: the last step)."""

    def start(self, loop: asyncio.AbstractEventLoop, on_outputs: OnOutputs, on_failure: OnFailure) -> None:
        """Begin delivering outputs (and a failure, once) to callbacks run on `loop`."""

    def send(self, command: CoreCommand) -> None:
        """Hand a command to the core (from the event loop; never blocks)."""

    async def pause(self, timeout: float) -> None:
        """Hold the core before its next step; returns once no step runs."""

    def resume(self) -> None: ...

    @property
    def is_paused(self) -> bool: ...

    async def reset_prefix_cache(self) -> bool:
        """Have the core forget the cached prefixes no running request holds (between steps); False when
        running requests still hold cached blocks."""

    def stop(self, timeout: float = 10.0) -> None:
        """Abort everything and end the core (thread or process); from any thread, once started or not."""

    def hung_s(self) -> float:
        """Seconds the core has left a ping unanswered, once past its hang timeout (hang_watch.py); 0.0 while
        it answers."""


class InprocClient:
    """The core in a thread of this process; `gate` freezes it between steps (tests, pause)."""

    def __init__(self, core: Any) -> None:
        self.core = core
        self.stats: EngineStats | None = core.stats()
        lock = threading.Lock()
        self._cv = threading.Condition(lock)
        self.gate = StepGate(lock, self._cv)
        self._inbox: list[CoreCommand] = []
        self._stopped = False
        self._thread: threading.Thread | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._on_outputs: OnOutputs | None = None
        self._core_loop = CoreLoop(core, self.gate, self._publish)
        self._num_steps = 0
        self._answers = _Answers()

    def start(self, loop: asyncio.AbstractEventLoop, on_outputs: OnOutputs, on_failure: OnFailure) -> None:
        self._loop, self._on_outputs, self._on_failure = loop, on_outputs, on_failure
        self._thread = threading.Thread(target=self._run, name="mopt-engine-core", daemon=True)
        self._thread.start()

    def send(self, command: CoreCommand) -> None:
        with self._cv:
            self._inbox.append(command)
            self.gate._wake_loop()

    async def pause(self, timeout: float) -> None:
        self.gate.hold()
        await asyncio.to_thread(self.gate.wait_parked, timeout)

    def resume(self) -> None:
        self.gate.release()

    @property
    def is_paused(self) -> bool:
        return self.gate.is_held

    async def reset_prefix_cache(self) -> bool:
        return await self._answers.call(self.send, ControlOp.RESET_PREFIX_CACHE)

    def hung_s(self) -> float:
        return 0.0  # not watched: a thread of a Python program's own server, or of a test

    def stop(self, timeout: float = 10.0) -> None:
        with self._cv:
            self._stopped = True
            self.gate._wake_loop()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(timeout)

    # ----------------------------------------------------------------- loop thread
    def _run(self) -> None:
        try:
            while True:
                commands = self._next_commands()
                if commands is None:
                    break
                self._core_loop.apply(commands)
                if self._core_loop.has_work and self.gate._pass():
                    self._num_steps += 1
                    with self._cv:  # counted before its outputs can reach anyone (gate.step's count)
                        self.gate._round(self._num_steps, parking=False)
                    self._core_loop.step()
                else:
                    self._core_loop.flush()
        except CoreStopped:
            pass
        except BaseException as exc:  # noqa: BLE001 - any failure kills the core, and every request must hear of it
            logger.exception("engine core failed")
            self._deliver(self._answers.fail, EngineDeadError(f"engine core failed: {exc}"))
            self._deliver(self._on_failure, exc)
        else:
            self.core.abort_all()
            self._core_loop.flush()
        finally:
            self.gate._end()

    def _next_commands(self) -> list[CoreCommand] | None:
        """Commands waiting in the inbox; blocks while there is nothing to do. None means stop."""
        with self._cv:
            while not (self._inbox or self._stopped or (self._core_loop.has_work and self.gate._may_step())):
                self.gate._round(self._num_steps, parking=True)
                self._cv.wait()
            self.gate._round(self._num_steps, parking=False)
            if self._stopped:
                return None
            commands, self._inbox = self._inbox, []
            return commands

    def _publish(self, outputs: list[CoreOutputs]) -> None:
        out = outputs[0]
        self.stats = out.stats  # before delivering: a client that saw a token sees its blocks
        if out.acks:
            self._deliver(self._answers.answer, out)
        self._deliver(self._on_outputs, out)

    def _deliver(self, callback: Callable | None, item: Any) -> None:
        loop = self._loop
        if callback is not None and loop is not None and not loop.is_closed():
            loop.call_soon_threadsafe(callback, item)


class ProcessClient:
    """A frontend's end of an engine-core process (core_process.py starts it and hands this over)."""

    def __init__(self, handle: Any, client: int = 0) -> None:
        import zmq

        self.handle = handle
        """core_process.CoreHandle: the process, its socket addresses and what it reported at start."""
        self.client = client
        self.stats: EngineStats | None = None
        self._zmq = zmq
        self._context = zmq.Context()
        self._input = self._context.socket(zmq.PUSH)
        self._input.setsockopt(zmq.SNDHWM, 0)  # never drop or block a command: the core reads them all each step
        self._input.setsockopt(zmq.LINGER, 0)
        self._input.connect(handle.input_address)
        self._output = self._context.socket(zmq.PULL)
        self._output.setsockopt(zmq.RCVHWM, 0)
        self._output.setsockopt(zmq.LINGER, 0)
        self._output.connect(handle.output_addresses[client])
        self._loop: asyncio.AbstractEventLoop | None = None
        self._on_outputs: OnOutputs | None = None
        self._on_failure: OnFailure | None = None
        self._answers = _Answers()
        self._paused = False
        self._failed = False
        self._closed = False
        self._watch = HangWatch(hang_timeout_s(), self._ping)

    def start(self, loop: asyncio.AbstractEventLoop, on_outputs: OnOutputs, on_failure: OnFailure) -> None:
        self._loop, self._on_outputs, self._on_failure = loop, on_outputs, on_failure
        loop.add_reader(self._output.getsockopt(self._zmq.FD), self._drain)
        loop.add_reader(self.handle.sentinel, self._process_ended)
        self._drain()  # the descriptor only signals new arrivals: read what came before the reader
        self._ping()
        self._watch.start(loop)

    def _ping(self) -> None:
        """Ask for the core's stats: it answers between two steps, so the answer also says it still runs."""
        self.send(CoreControl(ControlOp.STATS, client=self.client))

    def hung_s(self) -> float:
        return self._watch.hung_s()

    def send(self, command: CoreCommand) -> None:
        if self._closed or self._failed:
            return
        self._input.send(encode(command), self._zmq.NOBLOCK)

    async def pause(self, timeout: float) -> None:
        self._paused = True
        await asyncio.wait_for(self._control(ControlOp.PAUSE), timeout)

    def resume(self) -> None:
        self._paused = False
        self.send(CoreControl(ControlOp.RESUME, client=self.client))

    @property
    def is_paused(self) -> bool:
        """The core's state as its latest outputs said (every frontend hears of a PAUSE or RESUME, whichever
        frontend sent it); this frontend's own PAUSE or RESUME counts from when it was sent."""
        return self._paused

    async def reset_prefix_cache(self) -> bool:
        return await self._control(ControlOp.RESET_PREFIX_CACHE)

    async def _control(self, op: ControlOp) -> bool:
        return await self._answers.call(self.send, op, self.client)

    def stop(self, timeout: float = 10.0) -> None:
        if self._closed:
            return
        self._closed = True
        self._watch.stop()
        loop = self._loop
        if loop is not None and not loop.is_closed():
            for fd in (self._output.getsockopt(self._zmq.FD), self.handle.sentinel):
                try:
                    loop.remove_reader(fd)
                except (ValueError, OSError, RuntimeError):  # a loop of another thread, or closed
                    pass
        if self._watch.hung_s():  # it would not read its SHUTDOWN: killed at once, not after `timeout`
            timeout = 0.0
        self.handle.stop(self._input, timeout)  # a no-op for a frontend that did not start the core
        self._input.close(0)
        self._output.close(0)
        self._context.term()

    # ----------------------------------------------------------------- event loop side
    def _drain(self) -> None:
        zmq = self._zmq
        while not self._closed:
            try:
                data = self._output.recv(zmq.NOBLOCK)
            except zmq.Again:
                return
            self._watch.heard()
            out = decode_outputs(data)
            if out.stats is not None:
                self.stats = out.stats
            self._paused = out.paused
            self._answers.answer(out)
            if out.error is not None:
                self._fail(EngineDeadError(f"engine core failed: {out.error}"))
                return
            if self._on_outputs is not None:
                self._on_outputs(out)

    def _process_ended(self) -> None:
        self._drain()  # what it sent before it ended (its own error, say) comes first
        code = self.handle.exitcode()  # None in a frontend that did not start it: only its parent can read it
        how = "" if code is None else f" (exit code {code})"
        self._fail(EngineDeadError(f"the engine core process exited{how}"))

    def _fail(self, exc: BaseException) -> None:
        if self._failed or self._closed:
            return
        self._failed = True
        self._watch.stop()
        self._answers.fail(exc)
        if self._loop is not None:
            try:
                self._loop.remove_reader(self.handle.sentinel)
            except (ValueError, OSError):
                pass
        if self._on_failure is not None:
            self._on_failure(exc)
