"""AsyncEngine: the LLMEngine behind an asyncio API, for the server.

The engine is not thread-safe and `step()` blocks while the model runs, so one background
thread owns it: it drains an inbox of add/abort commands, runs a step when there is work (else
sleeps on a condition), and hands each output to its request's own asyncio.Queue through
`loop.call_soon_threadsafe`. The event loop never waits on the model.

If the loop raises, every in-flight request gets the error, `dead` turns True and `on_fatal`
runs on the event loop (the server uses it to exit non-zero).

`AsyncEngine.gate` (a StepGate) can hold the loop between steps while it keeps applying adds
and aborts: tests use it for an engine that is provably mid-request on any machine.

Test hooks: the environment variable MOPT_FAULT_AFTER_STEPS=N makes the loop raise after N steps;
MOPT_HOLD_AFTER_STEPS=N starts the gate held with N steps allowed, so a test driving `mopt serve`
as a process gets an engine that provably stops mid-request (a drain that must time out).
"""

from __future__ import annotations

import asyncio
import logging
import os
import threading
import time
from collections.abc import AsyncIterator, Callable, Iterator
from concurrent.futures import Future
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from model_optimizer.engine.engine import EngineStats, LLMEngine
from model_optimizer.engine.outputs import CompletionOutput, RequestOutput
from model_optimizer.sampling_params import SamplingParams

logger = logging.getLogger(__name__)
FAULT_ENV = "MOPT_FAULT_AFTER_STEPS"
HOLD_ENV = "MOPT_HOLD_AFTER_STEPS"


class EngineDeadError(RuntimeError):
    """The engine loop has failed; no request can be served any more."""


class StepGate:
    """A gate in front of every engine step: hold it and the loop runs no step until it is released.

    Why it exists: a test of disconnects, aborts or drains needs an engine that is provably in
    the middle of a request. Betting on the model being slow does not give that (a fast machine
    finishes the request first, a slow one times out), so the test holds the gate instead and
    lets steps through one by one. The same switch is meant for pausing generation later (say,
    while weights are swapped) without dropping requests.

    While held, the loop still applies what arrives in its inbox: new requests are queued, aborts
    free their blocks, `abort_all` and `stop` work as always, so a held gate never blocks shutdown
    or a drain. A step already past the gate when `hold()` is called finishes.

    Every method is thread-safe. `wait_parked`, `step` and `run_until` block the calling thread:
    call them from a test thread or an executor, never from the event loop the engine delivers
    to. Open (the default), the gate costs the loop one attribute read per step and, each time
    round, a notify that nobody waits for.
    """

    def __init__(self, lock: threading.Lock, loop_wakeup: threading.Condition) -> None:
        self._lock = lock
        self._loop_wakeup = loop_wakeup
        """The condition the engine loop waits on (it shares `lock`)."""
        self._changed = threading.Condition(lock)
        """Observers (wait_parked) wait on this; the loop notifies it every time round."""
        self._held = False
        self._credit = 0
        """Steps that may still pass while held."""
        self._parked = False
        """The loop is waiting with nothing it may do (no command, no step allowed or no work)."""
        self._ended = False
        self._num_steps = 0

    # ----------------------------------------------------------------- controls
    @property
    def is_held(self) -> bool:
        return self._held

    @property
    def num_steps(self) -> int:
        """Steps the loop has run (all of them, held or not), as of its last time round."""
        return self._num_steps

    def hold(self) -> None:
        """Stop the loop before its next step; steps granted earlier by `allow` are withdrawn.

        Returns at once: a step already past the gate finishes; `wait_parked()` says when none runs.
        """
        with self._lock:
            self._held, self._credit = True, 0

    def release(self) -> None:
        """Let the loop step freely again."""
        with self._lock:
            self._held, self._credit = False, 0
            self._wake_loop()

    @contextmanager
    def held(self) -> Iterator[StepGate]:
        """`with gate.held():` holds the gate for the block and releases it however the block ends."""
        self.hold()
        try:
            yield self
        finally:
            self.release()

    def allow(self, num_steps: int = 1) -> None:
        """Let `num_steps` more steps through a held gate (they run once there is work)."""
        if isinstance(num_steps, bool) or not isinstance(num_steps, int) or num_steps < 1:
            raise ValueError(f"num_steps must be a positive integer, got {num_steps!r}")
        with self._lock:
            if not self._held:
                raise ValueError("allow() applies to a held gate; call hold() first")
            self._credit += num_steps
            self._wake_loop()

    def wait_parked(self, timeout: float | None = None) -> bool:
        """Block until the loop waits with nothing it may do: every command sent before this call is
        applied (requests added, aborts done, their blocks freed) and no step runs. With the gate
        open that means idle. False on timeout or when the loop has ended."""
        with self._lock:
            return self._changed.wait_for(lambda: self._parked or self._ended, timeout) and not self._ended

    def step(self, num_steps: int = 1, timeout: float | None = None) -> int:
        """On a held gate, run up to `num_steps` steps and wait until the loop parks again; returns how
        many ran (fewer when the engine ran out of work; the rest of the grant is withdrawn)."""
        before = self._num_steps
        self.allow(num_steps)
        self.wait_parked(timeout)
        with self._lock:
            self._credit = 0
            return self._num_steps - before

    def run_until(self, condition: Callable[[], bool], timeout: float | None = None) -> bool:
        """On a held gate, run one step at a time until `condition()` holds (checked while parked).

        False when the engine runs out of work (or the loop ends) first, or `timeout` passes.
        """
        deadline = None if timeout is None else time.monotonic() + timeout
        while not condition():
            remaining = None if deadline is None else deadline - time.monotonic()
            if (remaining is not None and remaining <= 0) or self.step(1, remaining) == 0:
                return condition()
        return True

    # ----------------------------------------------------------------- loop side (lock held unless said)
    def _wake_loop(self) -> None:
        """Something changed for the loop (a command, a grant, stop): it is no longer parked."""
        self._parked = False
        self._loop_wakeup.notify()

    def _may_step(self) -> bool:
        return not self._held or self._credit > 0

    def _round(self, num_steps: int, parking: bool) -> None:
        """The loop's report each time round: steps run so far, and whether it is about to wait."""
        self._num_steps = num_steps
        self._parked = parking
        self._changed.notify_all()

    def _pass(self) -> bool:
        """Called by the loop (lock not held) before a step: may it run one now?"""
        if not self._held:
            return True  # open: no lock on the hot path
        with self._lock:
            if not self._held:
                return True
            if self._credit:
                self._credit -= 1
                return True
            return False

    def _end(self) -> None:
        with self._lock:
            self._ended = True
            self._changed.notify_all()


@dataclass
class _Stream:
    """The event-loop side of one request: where its outputs go."""

    queue: asyncio.Queue
    prompt_token_ids: list[int] = field(default_factory=list)
    n: int = 1


@dataclass
class _Add:
    request_id: str
    prompt: str | list[int]
    params: SamplingParams
    priority: int
    stream: _Stream
    done: Future
    incremental: bool = True
    """Decode text as tokens arrive (streaming); else once at finish."""


class AsyncEngine:
    def __init__(self, engine: LLMEngine, on_fatal: Callable[[BaseException], None] | None = None) -> None:
        self.engine = engine
        self.on_fatal = on_fatal
        self.stats: EngineStats = engine.stats()
        """Snapshot taken by the loop thread after every step; safe to read from any thread."""
        self.error: BaseException | None = None
        self._inbox: list[_Add | tuple[str, str]] = []
        lock = threading.Lock()
        self._cv = threading.Condition(lock)
        """The loop waits on it for a command, stop, or a step it may take."""
        self.gate = StepGate(lock, self._cv)
        """Hold it to stop the loop between steps (tests; pausing); open by default."""
        self._num_steps = 0  # steps run by the loop thread; published to the gate each time round
        self._streams: dict[str, _Stream] = {}  # touched only by the loop thread
        self._stopped = False
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        fault = os.environ.get(FAULT_ENV)
        self._fault_after_steps = int(fault) if fault else None
        hold = os.environ.get(HOLD_ENV)
        if hold:
            self.gate.hold()
            if int(hold) > 0:
                self.gate.allow(int(hold))

    # ----------------------------------------------------------------- lifecycle
    def start(self, loop: asyncio.AbstractEventLoop | None = None) -> None:
        """Start the loop thread; outputs are delivered to `loop` (default: the running loop)."""
        self._loop = loop or asyncio.get_running_loop()
        self._thread = threading.Thread(target=self._run, name="mopt-engine-loop", daemon=True)
        self._thread.start()

    def stop(self, timeout: float = 10.0) -> None:
        """Abort everything still running and end the loop thread."""
        with self._cv:
            self._stopped = True
            self.gate._wake_loop()
        if self._thread is not None:
            self._thread.join(timeout)

    @property
    def dead(self) -> bool:
        return self.error is not None

    @property
    def num_in_flight(self) -> int:
        return len(self._streams)

    # ----------------------------------------------------------------- requests
    async def generate(
        self, request_id: str, prompt: str | list[int], params: SamplingParams, priority: int = 0, stream: bool = True
    ) -> AsyncIterator[RequestOutput]:
        """Yield the request's cumulative outputs until it finishes; stopping early aborts it.

        Raises ValueError (bad or oversized request) before the first output, and
        EngineDeadError when the engine loop has failed.
        """
        request_stream = await self.add_request(request_id, prompt, params, priority, stream)
        async for output in request_stream:
            yield output

    async def add_request(
        self, request_id: str, prompt: str | list[int], params: SamplingParams, priority: int = 0, stream: bool = True
    ) -> RequestStream:
        """Queue a request; returns once the engine has accepted it (ValueError if it refused it).

        With `stream` False, outputs before the last carry token ids but no text (decoded once at finish).
        """
        if self.error is not None:
            raise EngineDeadError(f"engine loop failed: {self.error}")
        queue_stream = _Stream(asyncio.Queue(), n=params.n)
        command = _Add(request_id, prompt, params, priority, queue_stream, Future(), stream)
        self._send(command)
        try:
            await asyncio.wrap_future(command.done)
        except (asyncio.CancelledError, GeneratorExit):
            self.abort(request_id)  # the add may still go through: the abort follows it in the inbox
            raise
        return RequestStream(self, request_id, queue_stream.queue)

    def abort(self, request_id: str) -> None:
        """Abort a request from any thread; its blocks are freed before the next step."""
        self._send(("abort", request_id))

    def abort_all(self) -> None:
        """Finish every in-flight request with finish_reason 'abort' (used when a drain times out)."""
        self._send(("abort_all", ""))

    def _send(self, command: _Add | tuple[str, str]) -> None:
        with self._cv:
            self._inbox.append(command)
            self.gate._wake_loop()

    # ----------------------------------------------------------------- loop thread
    def _run(self) -> None:
        try:
            while True:
                commands = self._next_commands()
                if commands is None:
                    break
                self._apply(commands)
                self.stats = self.engine.stats()
                if self.engine.has_unfinished_requests() and self.gate._pass():
                    self._step()
                    self._num_steps += 1
        except BaseException as exc:  # noqa: BLE001 - any failure kills the engine, and every request must hear of it
            logger.exception("engine loop failed")
            self._fail(exc)
        else:
            self._abort_everything()
        finally:
            self.gate._end()

    def _next_commands(self) -> list | None:
        """Commands waiting in the inbox; blocks while there is nothing to do. None means stop."""
        with self._cv:
            while not (
                self._inbox or self._stopped or (self.engine.has_unfinished_requests() and self.gate._may_step())
            ):
                self.gate._round(self._num_steps, parking=True)
                self._cv.wait()
            self.gate._round(self._num_steps, parking=False)
            if self._stopped:
                return None
            commands, self._inbox = self._inbox, []
            return commands

    def _apply(self, commands: list) -> None:
        for command in commands:
            if isinstance(command, _Add):
                self._apply_add(command)
            elif command[0] == "abort":
                self.engine.abort(command[1])
                self._streams.pop(command[1], None)
            else:
                self._abort_everything()

    def _apply_add(self, command: _Add) -> None:
        try:
            self.engine.add_request(
                command.request_id, command.prompt, command.params, command.priority, stream=command.incremental
            )
        except Exception as exc:  # noqa: BLE001 - handed to the caller, who turns ValueError into a 400
            command.done.set_exception(exc)
            return
        if isinstance(command.prompt, list):
            command.stream.prompt_token_ids = command.prompt
        self._streams[command.request_id] = command.stream
        command.done.set_result(None)

    def _step(self) -> None:
        if self._fault_after_steps is not None and self.engine.num_steps >= self._fault_after_steps:
            raise RuntimeError(f"injected engine fault after {self._fault_after_steps} steps ({FAULT_ENV})")
        outputs = self.engine.step()
        self.stats = self.engine.stats()  # before delivering: a client that saw a token sees its blocks
        deliveries = []
        for output in outputs:
            stream = self._streams.get(output.request_id)
            if stream is None:
                continue
            deliveries.append((stream.queue, output))
            if output.finished:
                del self._streams[output.request_id]
        if deliveries:
            self._deliver(deliveries)

    def _abort_everything(self) -> None:
        deliveries = []
        for request_id, stream in list(self._streams.items()):
            output = self.engine.abort(request_id)
            deliveries.append((stream.queue, output or _aborted(request_id, stream)))
        self._streams.clear()
        if deliveries:
            self._deliver(deliveries)

    def _fail(self, exc: BaseException) -> None:
        self.error = exc
        with self._cv:
            pending, self._inbox = self._inbox, []
        for command in pending:
            if isinstance(command, _Add):
                command.done.set_exception(EngineDeadError(f"engine loop failed: {exc}"))
        deliveries = [(s.queue, exc) for s in self._streams.values()]
        self._streams.clear()
        self._deliver(deliveries)
        if self.on_fatal is not None and self._loop is not None:
            self._loop.call_soon_threadsafe(self.on_fatal, exc)

    def _deliver(self, deliveries: list[tuple[asyncio.Queue, Any]]) -> None:
        def put_all() -> None:
            for queue, item in deliveries:
                queue.put_nowait(item)

        if self._loop is not None and not self._loop.is_closed():
            self._loop.call_soon_threadsafe(put_all)


class RequestStream:
    """Async iterator over one request's outputs; leaving it early (break, cancel, close) aborts the request."""

    def __init__(self, engine: AsyncEngine, request_id: str, queue: asyncio.Queue) -> None:
        self.engine = engine
        self.request_id = request_id
        self.queue = queue
        self.finished = False
        """True once the final output has arrived."""
        self.aborted = False

    async def __aiter__(self) -> AsyncIterator[RequestOutput]:
        try:
            while not self.finished and not self.aborted:
                item = await self.queue.get()
                if isinstance(item, BaseException):
                    self.aborted = True  # the engine is gone: nothing left to abort
                    raise EngineDeadError(f"engine loop failed: {item}") from item
                self.finished = item.finished
                yield item
        finally:
            self.abort()

    def abort(self) -> None:
        """Abort the request unless it has finished; safe to call more than once."""
        if not self.finished and not self.aborted:
            self.aborted = True
            self.engine.abort(self.request_id)


def _aborted(request_id: str, stream: _Stream) -> RequestOutput:
    """A final 'abort' output for a stream the engine no longer knows (it never is, unless a bug says so)."""
    outputs = [
        CompletionOutput(index=i, text="", token_ids=[], logprobs=None, finish_reason="abort") for i in range(stream.n)
    ]
    return RequestOutput(request_id, None, stream.prompt_token_ids, outputs, finished=True)
