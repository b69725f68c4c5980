"""AsyncEngine: the LLMEngine behind an asyncio API, for the server.

The engine is not thread-safe and `step()` blocks while the model runs, so one background
thread owns it: it drains an inbox of add/abort commands, runs a step when there is work (else
sleeps on a condition), and hands each step's outputs to their requests' mailboxes with one
`loop.call_soon_threadsafe` per step. The event loop never waits on the model.

A reader that falls behind (the event loop is busy: the server streams to hundreds of requests)
finds several outputs waiting in its mailbox; RequestStream hands them over as one (merge_outputs),
so the server sends one chunk for them, not one per step. Only what already waits is merged: a
reader that keeps up still gets one output per step.

If the loop raises, every in-flight request gets the error, `dead` turns True and `on_fatal`
runs on the event loop (the server uses it to exit non-zero).

`AsyncEngine.gate` (a StepGate, step_gate.py) can hold the loop between steps while it keeps
applying adds and aborts: tests use it for an engine that is provably mid-request on any machine.
Test hooks for `mopt serve` run as a process (MOPT_FAULT_AFTER_STEPS, MOPT_HOLD_AFTER_STEPS) are
read once, at construction (step_gate.TestHooks).
"""

from __future__ import annotations

import asyncio
import logging
import threading
from collections import deque
from collections.abc import AsyncIterator, Callable
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Any

from model_optimizer.runtime.engine.engine import EngineStats, LLMEngine
from model_optimizer.runtime.engine.outputs import CompletionOutput, RequestOutput, merge_outputs
from model_optimizer.runtime.engine.step_gate import FAULT_ENV, HOLD_ENV, StepGate, TestHooks
from model_optimizer.runtime.sampling_params import RequestOutputKind, SamplingParams

logger = logging.getLogger(__name__)
__all__ = ["FAULT_ENV", "HOLD_ENV", "AsyncEngine", "EngineDeadError", "RequestStream", "StepGate"]


class EngineDeadError(RuntimeError):
    """The engine loop has failed; no request can be served any more."""


class Mailbox:
    """One request's outputs on their way to its reader, on the event loop; one reader, never full.

    An asyncio.Queue does more than this needs (bounds, task accounting, a deque of getters) on every
    put and get, and a server puts one output per running request per engine step: this is a deque
    and the one reader's future."""

    __slots__ = ("items", "waiter")

    def __init__(self) -> None:
        self.items: deque = deque()
        self.waiter: asyncio.Future | None = None

    def put(self, item: Any) -> None:
        self.items.append(item)
        waiter = self.waiter
        if waiter is not None:
            self.waiter = None
            if not waiter.done():
                waiter.set_result(None)

    async def get(self) -> Any:
        while not self.items:
            self.waiter = asyncio.get_running_loop().create_future()
            try:
                await self.waiter
            finally:
                self.waiter = None
        return self.items.popleft()

    def take_outputs(self) -> list[Any]:
        """The outputs already waiting, oldest first, up to the first exception or failed request's
        output (`error` set), which stays queued: the reader gets the tokens before it, then it."""
        items, taken = self.items, []
        while items and not isinstance(items[0], BaseException) and items[0].error is None:
            taken.append(items.popleft())
        return taken


@dataclass
class _Stream:
    """The event-loop side of one request: where its outputs go."""

    queue: Mailbox
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
        hooks = TestHooks.from_env()
        self._fault_after_steps = hooks.fault_after_steps
        if hooks.hold_after_steps is not None:
            self.gate.hold()
            if hooks.hold_after_steps > 0:
                self.gate.allow(hooks.hold_after_steps)

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
        queue_stream = _Stream(Mailbox(), n=params.n)
        command = _Add(request_id, prompt, params, priority, queue_stream, Future(), stream)
        self._send(command)
        try:
            await asyncio.wrap_future(command.done)
        except (asyncio.CancelledError, GeneratorExit):
            self.abort(request_id)  # the add may still go through: the abort follows it in the inbox
            raise
        return RequestStream(self, request_id, queue_stream.queue, params.output_kind)

    def abort(self, request_id: str) -> None:
        """Abort a request from any thread; its blocks are freed before the next step."""
        self._send(("abort", request_id))

    def abort_all(self) -> None:
        """Finish every in-flight request with finish_reason 'abort' (used when a drain times out)."""
        self._send(("abort_all", ""))

    def fail(self, exc: BaseException) -> None:
        """Fail the engine from any thread (a tensor-parallel worker died while no step ran): the loop
        raises `exc` as a failed step would, so requests, /health and the server's exit follow."""
        self._send(("fail", exc))  # type: ignore[arg-type]

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
            elif command[0] == "fail":
                raise command[1]
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

    def _deliver(self, deliveries: list[tuple[Mailbox, Any]]) -> None:
        def put_all() -> None:
            for mailbox, item in deliveries:
                mailbox.put(item)

        if self._loop is not None and not self._loop.is_closed():
            self._loop.call_soon_threadsafe(put_all)


class RequestStream:
    """Async iterator over one request's outputs; leaving it early (break, cancel, close) aborts the request.

    Outputs that are already waiting when the reader takes one are merged into it (merge_outputs,
    by the request's output kind): a slow reader gets fewer, larger outputs, each token exactly once.
    An engine failure queued behind them is raised after they are delivered, and a failed request's
    last output (`error` set) comes on its own after them, as it would have unmerged."""

    def __init__(
        self,
        engine: AsyncEngine,
        request_id: str,
        queue: Mailbox,
        kind: RequestOutputKind = RequestOutputKind.CUMULATIVE,
    ) -> None:
        self.engine = engine
        self.request_id = request_id
        self.queue = queue
        self.kind = kind
        """What each output holds (SamplingParams.output_kind): how waiting outputs are merged."""
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
                if self.queue.items and item.error is None:  # the reader fell behind: what waits goes with it
                    item = merge_outputs([item, *self.queue.take_outputs()], self.kind)
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
