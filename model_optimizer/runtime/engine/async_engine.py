"""AsyncEngine: the frontend of the engine for the server, on its event loop.

It turns requests into CoreRequests (input_processor.py), hands them to a core client
(core_client.py: the core in a thread of this process, or in a process of its own) and turns each
CoreOutputs the client delivers into RequestOutputs (output_processor.py: text, stop strings, n > 1,
output kinds), one mailbox per request. All of that runs on the event loop, which never waits on
the model: with the core in its own process, the GIL it holds is this process's alone.

A reader that falls behind (the event loop is busy: the server streams to hundreds of requests)
finds several outputs waiting in its mailbox; RequestStream hands them over as one (merge_outputs),
so the server sends one chunk for them, not one per step. Only what already waits is merged: a
reader that keeps up still gets one output per step.

If the core fails (an exception in a step, its process killed), every request still running gets the
error, `dead` turns True and `on_fatal` runs (the server uses it to exit non-zero).
"""

from __future__ import annotations

import asyncio
import logging
from collections import deque
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from typing import Any

from model_optimizer.runtime.engine.core_client import CoreClient, EngineDeadError
from model_optimizer.runtime.engine.input_processor import FitLimits, InputProcessor
from model_optimizer.runtime.engine.messages import ControlOp, CoreAbort, CoreControl, CoreOutputs, EngineStats
from model_optimizer.runtime.engine.output_processor import OutputProcessor
from model_optimizer.runtime.engine.outputs import CompletionOutput, RequestOutput, merge_outputs
from model_optimizer.runtime.engine.step_gate import FAULT_ENV, HOLD_ENV
from model_optimizer.runtime.sampling_params import RequestOutputKind, SamplingParams

logger = logging.getLogger(__name__)
__all__ = ["FAULT_ENV", "HOLD_ENV", "AsyncEngine", "EngineDeadError", "RequestStream"]


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


class AsyncEngine:
    def __init__(
        self,
        client: CoreClient,
        tokenizer: Any,
        vocab_size: int,
        limits: FitLimits,
        on_fatal: Callable[[BaseException], None] | None = None,
        client_id: int = 0,
        stream_interval: int = 1,
    ) -> None:
        self.client = client
        self.on_fatal = on_fatal
        self.inputs = InputProcessor(tokenizer, vocab_size, limits, client_id)
        self.output_processor = OutputProcessor(tokenizer, stream_interval)
        self.error: BaseException | None = None
        self._streams: dict[str, _Stream] = {}
        self._loop: asyncio.AbstractEventLoop | None = None
        self.aborts_all = 0
        """How often everything in flight was aborted: work of several engine requests in turn (a beam search)
        that started before one ends with it, though none of its requests was in flight at that moment."""

    @classmethod
    def in_process(
        cls, engine: Any, on_fatal: Callable[[BaseException], None] | None = None, stream_interval: int = 1
    ) -> AsyncEngine:
        """An AsyncEngine over an LLMEngine of this process (`LLM(...).engine`): its core runs in a thread."""
        from model_optimizer.runtime.engine.core_client import InprocClient

        core = engine.core
        client = InprocClient(core)
        return cls(client, engine.tokenizer, engine.info.vocab_size, core.limits, on_fatal, 0, stream_interval)

    @property
    def stats(self) -> EngineStats | None:
        """The core's latest stats (as of its last step, or the last outputs that reached this frontend)."""
        return self.client.stats

    @property
    def gate(self) -> Any:
        """The in-process core's StepGate (tests hold it to freeze the engine between steps)."""
        return self.client.gate  # type: ignore[attr-defined]

    # ----------------------------------------------------------------- lifecycle
    def start(self, loop: asyncio.AbstractEventLoop | None = None) -> None:
        """Start delivering outputs on `loop` (default: the running loop)."""
        self._loop = loop or asyncio.get_running_loop()
        self.client.start(self._loop, self._on_outputs, self._on_failure)

    def stop(self, timeout: float = 10.0) -> None:
        """Abort everything still running and end the core; from the event loop or any other thread."""
        if self._loop is not None and _running_loop() is self._loop:
            self._abort_everything()
        else:
            self.abort_all()
        self.client.stop(timeout)

    @property
    def dead(self) -> bool:
        return self.error is not None

    @property
    def num_in_flight(self) -> int:
        """Requests this frontend still serves; an aborted one has left only once its abort is sent."""
        return len(self._streams)

    # ----------------------------------------------------------------- requests
    async def generate(
        self, request_id: str, prompt: str | list[int], params: SamplingParams, priority: int = 0, stream: bool = True
    ) -> AsyncIterator[RequestOutput]:
        """Yield the request's outputs until it finishes; stopping early aborts it.

        Raises ValueError (bad or oversized request) before the first output, and
        EngineDeadError when the engine has failed.
        """
        request_stream = await self.add_request(request_id, prompt, params, priority, stream)
        async for output in request_stream:
            yield output

    async def add_request(
        self, request_id: str, prompt: str | list[int], params: SamplingParams, priority: int = 0, stream: bool = True
    ) -> RequestStream:
        """Queue a request (ValueError, at once, when it is malformed or could never fit).

        With `stream` False, outputs before the last carry token ids but no text (decoded once at finish).
        """
        if self.error is not None:
            raise EngineDeadError(f"engine core failed: {self.error}")
        if request_id in self._streams:
            raise ValueError(f"request id {request_id!r} is already in use")
        request = self.inputs.request(request_id, prompt, params, priority)
        text = prompt if isinstance(prompt, str) else None
        self.output_processor.add_request(
            request_id, text, request.prompt_token_ids, params, request.arrival_time, stream
        )
        mailbox = Mailbox()
        self._streams[request_id] = _Stream(mailbox, request.prompt_token_ids, params.n)
        self.client.send(request)
        return RequestStream(self, request_id, mailbox, params.output_kind)

    def abort(self, request_id: str) -> None:
        """Drop a request (on the event loop): the core frees its blocks before its next step."""
        self._abort_ids([request_id])

    def abort_streams(self, streams: list[RequestStream]) -> None:
        """Abort the unfinished ones among `streams` (on the event loop) with one command, so the core
        drops every one of them before its next step: aborts sent one by one could reach the core, a
        thread or process of its own, on either side of a step (a client gone with many prompts)."""
        ids = []
        for stream in streams:
            if not stream.finished and not stream.aborted:
                stream.aborted = True
                ids.append(stream.request_id)
        self._abort_ids(ids)

    def _abort_ids(self, request_ids: list[str]) -> None:
        known = [request_id for request_id in request_ids if request_id in self._streams]
        if not known:
            return
        for request_id in known:
            self.output_processor.abort(request_id)
        self.client.send(CoreAbort(known))
        for request_id in known:  # only now: a request leaves `num_in_flight` once the core has been told
            del self._streams[request_id]

    def abort_all(self) -> None:
        """Finish every in-flight request with finish_reason 'abort' (a drain that timed out); any thread."""
        if self._loop is not None and not self._loop.is_closed():
            self._loop.call_soon_threadsafe(self._abort_everything)

    def fail(self, exc: BaseException) -> None:
        """Fail the core from any thread (a tensor-parallel worker died while no step ran): requests,
        /health and the server's exit follow as for a failed step."""
        self.client.send(CoreControl(ControlOp.FAIL, arg=str(exc)))

    async def pause(self, timeout: float) -> None:
        """Hold the core before its next step; returns once no step runs. Requests keep their blocks."""
        await self.client.pause(timeout)

    def resume(self) -> None:
        self.client.resume()

    @property
    def is_paused(self) -> bool:
        return self.client.is_paused

    async def reset_prefix_cache(self, timeout: float) -> bool:
        """Have the core forget every cached prefix no running request holds, before its next step; False when
        running requests still hold cached blocks (they stay cached). EngineDeadError once the engine has failed,
        TimeoutError when no answer came within `timeout` seconds (a bound on a hang)."""
        if self.error is not None:
            raise EngineDeadError(f"engine core failed: {self.error}")
        return await asyncio.wait_for(self.client.reset_prefix_cache(), timeout)

    # ----------------------------------------------------------------- outputs (event loop)
    def _on_outputs(self, out: CoreOutputs) -> None:
        outputs, stopped = self.output_processor.process(out)
        if stopped:  # stop strings found in the text: the core drops those completions
            self.client.send(CoreAbort(stopped))
        streams = self._streams
        for output in outputs:
            stream = streams.get(output.request_id)
            if stream is None:
                continue
            stream.queue.put(output)
            if output.finished:
                del streams[output.request_id]

    def _abort_everything(self) -> None:
        self.aborts_all += 1
        streams, self._streams = self._streams, {}
        for request_id, stream in streams.items():
            output = self.output_processor.abort(request_id)
            stream.queue.put(output or _aborted(request_id, stream))
        if streams:
            self.client.send(CoreAbort(list(streams)))

    def _on_failure(self, exc: BaseException) -> None:
        if self.error is not None:
            return
        self.error = exc
        streams, self._streams = self._streams, {}
        for stream in streams.values():
            stream.queue.put(exc)
        if self.on_fatal is not None:
            self.on_fatal(exc)


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
                    raise EngineDeadError(f"engine core failed: {item}") from item
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


def _running_loop() -> asyncio.AbstractEventLoop | None:
    try:
        return asyncio.get_running_loop()
    except RuntimeError:
        return None


def _aborted(request_id: str, stream: _Stream) -> RequestOutput:
    """A final 'abort' output for a stream the engine no longer knows (it never is, unless a bug says so)."""
    outputs = [
        CompletionOutput(index=i, text="", token_ids=[], logprobs=None, finish_reason="abort") for i in range(stream.n)
    ]
    return RequestOutput(request_id, None, stream.prompt_token_ids, outputs, finished=True)
