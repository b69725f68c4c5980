"""One API request's engine requests: admission, adding them, merging their outputs, cleanup.

A completions request with several prompts becomes several engine requests; all of them go
through one RequestGroup, whose `close()` aborts whatever is unfinished and releases the
admission, however the HTTP exchange ended (finished, client gone, error).
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator, Awaitable
from typing import Any

from fastapi import Request
from starlette.responses import StreamingResponse
from starlette.types import Receive, Scope, Send

from model_optimizer.engine.async_engine import EngineDeadError, RequestStream
from model_optimizer.engine.outputs import RequestOutput
from model_optimizer.sampling_params import SamplingParams
from model_optimizer.server.errors import APIError
from model_optimizer.server.state import Admission, ServerState


def failure(output: RequestOutput | None) -> str | None:
    """The engine's message when it failed this request alone (NaN/inf logits), else None."""
    return output.error if output is not None else None


class ClientDisconnected(Exception):
    """The client went away before its response was ready."""


class RequestGroup:
    def __init__(self, state: ServerState, prefix: str) -> None:
        self.state = state
        self.request_id = f"{prefix}-{uuid.uuid4().hex}"
        self.streams: list[RequestStream] = []
        self.num_completions: list[int] = []
        self.admission: Admission | None = None
        self.closed = False

    async def start(
        self, token_ids: list[list[int]], params: list[SamplingParams], priority: int, stream: bool
    ) -> None:
        """Admit and add one engine request per prompt; 400 if the engine refuses one, 503 if full or dead."""
        self.admission = self.state.admit(len(token_ids))
        for i, (ids, p) in enumerate(zip(token_ids, params)):
            try:
                stream = await self.state.engine.add_request(f"{self.request_id}-{i}", ids, p, priority, stream)
            except ValueError as exc:
                raise APIError(400, str(exc)) from None
            except EngineDeadError as exc:
                raise APIError(503, str(exc), headers={"Retry-After": "1"}) from None
            self.streams.append(stream)
            self.num_completions.append(p.n)

    async def outputs(self) -> AsyncIterator[tuple[int, RequestOutput]]:
        """(prompt index, cumulative output) as they come, from every prompt's request."""
        trackers = [self.state.metrics.tracker() for _ in self.streams]
        if len(self.streams) == 1:
            async for output in self.streams[0]:
                trackers[0].observe(output)
                yield 0, output
            return
        queue: asyncio.Queue = asyncio.Queue()

        async def pump(i: int, stream: RequestStream) -> None:
            try:
                async for output in stream:
                    await queue.put((i, output))
            except BaseException as exc:  # noqa: BLE001 - passed on to the consumer
                await queue.put((i, exc))

        tasks = [asyncio.ensure_future(pump(i, s)) for i, s in enumerate(self.streams)]
        try:
            remaining = len(tasks)
            while remaining:
                i, item = await queue.get()
                if isinstance(item, BaseException):
                    raise item
                trackers[i].observe(item)
                remaining -= item.finished
                yield i, item
        finally:
            for task in tasks:
                task.cancel()

    async def final_outputs(self) -> list[RequestOutput]:
        last: list[Any] = [None] * len(self.streams)
        async for i, output in self.outputs():
            last[i] = output
        return last

    def close(self) -> None:
        """Abort what is unfinished (counted as finished_reason "abort") and release the admission."""
        if self.closed:
            return
        self.closed = True
        metrics = self.state.metrics
        for stream, n in zip(self.streams, self.num_completions):
            if not stream.finished:
                metrics.success.labels(metrics.model_name, "abort").inc(n)
            stream.abort()
        if self.admission is not None:
            self.admission.release()


async def until_disconnect(request: Request, work: Awaitable[Any]) -> Any:
    """Await `work`, cancelling it (and raising ClientDisconnected) if the client hangs up first."""
    task = asyncio.ensure_future(work)
    watch = asyncio.ensure_future(_wait_disconnect(request))
    try:
        done, _ = await asyncio.wait({task, watch}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        watch.cancel()
        if not task.done():
            task.cancel()
    if task in done:
        return task.result()
    raise ClientDisconnected()


async def _wait_disconnect(request: Request) -> None:
    while True:
        message = await request.receive()
        if message["type"] == "http.disconnect":
            return


class GroupStreamingResponse(StreamingResponse):
    """An SSE response that closes its RequestGroup however the stream ends (even if it never started)."""

    def __init__(self, content: AsyncIterator[str], group: RequestGroup) -> None:
        super().__init__(content, media_type="text/event-stream", headers={"Cache-Control": "no-cache"})
        self.group = group

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        try:
            await super().__call__(scope, receive, send)
        finally:
            await self.body_iterator.aclose()  # type: ignore[union-attr]
            self.group.close()
