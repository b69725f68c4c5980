"""The life of one generation request, in one place: admission, engine requests, response, cleanup.

A completions request with several prompts becomes several engine requests; all of them form
one RequestGroup. `open_group` is the only way to make one: it admits the group (503 when the
server is full), adds its engine requests (400 when the engine refuses one) and, however the HTTP
exchange ends (finished, client gone, error, engine dead), aborts what is unfinished and releases
the admission exactly once. `respond` runs a group to an HTTP response: a JSON body, or an SSE
stream that takes the group's cleanup with it.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import AsyncIterator, Awaitable
from contextlib import AsyncExitStack, asynccontextmanager
from dataclasses import dataclass
from typing import Any, Protocol

from fastapi import Request
from fastapi.responses import JSONResponse, Response
from pydantic import BaseModel

from model_optimizer.runtime.beam_search import BeamSearchParams, beam_max_len
from model_optimizer.runtime.engine.async_engine import EngineDeadError, RequestStream
from model_optimizer.runtime.engine.outputs import RequestOutput, merge_outputs
from model_optimizer.runtime.sampling_params import RequestOutputKind, SamplingParams
from model_optimizer.runtime.server.beam_stream import BeamStream
from model_optimizer.runtime.server.errors import APIError, error_response, failure_status
from model_optimizer.runtime.server.protocol import StreamOptions
from model_optimizer.runtime.server.protocol_outputs import PromptTokensDetails, UsageInfo
from model_optimizer.runtime.server.state import RETRY_AFTER_S, Admission, ServerState
from model_optimizer.runtime.server.streaming import ClosingStreamingResponse, StreamFormat, sse_events

logger = logging.getLogger(__name__)


def new_request_id(prefix: str) -> str:
    """An id for the response (`chatcmpl-…`, `cmpl-…`); engine requests append `-<prompt index>`."""
    return f"{prefix}-{uuid.uuid4().hex}"


@dataclass
class Generation:
    """What a generation route hands to `respond`: one engine request per prompt, and how to answer."""

    request_id: str
    token_ids: list[list[int]]
    """One prompt's token ids per engine request."""
    params: list[SamplingParams]
    priority: int
    stream: bool
    stream_options: StreamOptions | None = None
    """Streams only: include_usage ends the stream with a usage chunk; continuous_usage_stats (with it) puts
    the usage so far on every chunk."""
    counts_output: bool = True
    """False for completions of the prompt alone (max_tokens 0 with echo): the token the engine makes for
    each is neither sent nor counted in the usage."""
    beam_search: list[BeamSearchParams] | None = None
    """use_beam_search's, one per prompt: each prompt runs a beam search (beam_stream.py) instead of its
    params' sampling."""


class ResponseFormat(StreamFormat, Protocol):
    """An API's shapes: its stream chunks (StreamFormat) and its whole, non-streamed response."""

    def response(self, finals: list[RequestOutput], usage: UsageInfo) -> BaseModel:
        """The response body once every prompt's request has finished."""


class ClientDisconnected(Exception):
    """The client went away before its response was ready."""


class RequestGroup:
    """One API request's engine requests, their outputs merged, their tokens counted."""

    def __init__(self, state: ServerState, request_id: str, counts_output: bool = True) -> None:
        self.state = state
        self.request_id = request_id
        self.streams: list[RequestStream] = []
        self.num_completions: list[int] = []
        self.num_prompt_tokens: list[int] = []
        self.num_output_tokens: list[int] = []
        """Per prompt: output tokens so far, summed over its n completions."""
        self.num_cached_tokens: list[int] = []
        """Per prompt: its tokens the prefix cache served, as its outputs report them."""
        self.admission: Admission | None = None
        self.closed = False
        self.counts_output = counts_output
        """Whether the outputs' tokens count in the usage (Generation.counts_output)."""

    async def start(
        self,
        token_ids: list[list[int]],
        params: list[SamplingParams],
        priority: int,
        stream: bool,
        beam_search: list[BeamSearchParams] | None = None,
    ) -> None:
        """Admit and add one engine request (or beam search) per prompt; 400 if the engine refuses one, 503 if
        full or dead."""
        # a beam search keeps up to beam_width engine requests in flight at each step
        num_requests = len(token_ids) if beam_search is None else sum(b.beam_width for b in beam_search)
        self.admission = self.state.admit(num_requests)
        engine = self.state.running_engine()
        for i, (ids, p) in enumerate(zip(token_ids, params)):
            request_id = f"{self.request_id}-{i}"
            beams = beam_search[i] if beam_search is not None else None
            try:
                if beams is not None:
                    max_len = beam_max_len(self.state.engine_config, self.state.model.max_model_len)
                    request_stream: Any = BeamStream(
                        engine, self.state.model, request_id, ids, beams, priority, stream, max_len
                    )
                else:
                    request_stream = await engine.add_request(request_id, ids, p, priority, stream)
            except ValueError as exc:
                raise APIError(400, str(exc)) from None
            except EngineDeadError as exc:
                raise APIError(503, str(exc), headers={"Retry-After": RETRY_AFTER_S}) from None
            self.streams.append(request_stream)
            self.num_completions.append(p.n if beams is None else beams.beam_width)
            self.num_prompt_tokens.append(len(ids))
            self.num_output_tokens.append(0)
            self.num_cached_tokens.append(0)

    async def outputs(self) -> AsyncIterator[tuple[int, RequestOutput]]:
        """(prompt index, output) as they come, from every prompt's request: DELTA outputs when
        streaming, else each request's one FINAL_ONLY output (see sampling.sampling_params). A reader
        slower than the engine gets the outputs that waited for it merged into one (RequestStream), so
        an output, and the chunk made of it, may carry several tokens per completion."""
        trackers = [self.state.metrics.tracker(n) for n in self.num_completions]
        if len(self.streams) == 1:  # the usual case: one generator fewer
            tracker = trackers[0]
            async for output in self.streams[0]:
                self.num_output_tokens[0] += tracker.observe(output)  # each output's tokens are new
                self.num_cached_tokens[0] = output.num_cached_tokens
                yield 0, output
            return
        async for i, output in self._merged():
            self.num_output_tokens[i] += trackers[i].observe(output)
            self.num_cached_tokens[i] = output.num_cached_tokens
            yield i, output

    async def _merged(self) -> AsyncIterator[tuple[int, RequestOutput]]:
        """Outputs of several prompts' requests as they come; those that waited for the reader are
        merged per prompt (as RequestStream does for one), an engine failure raised after them."""
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
                waiting = [await queue.get()]
                while not queue.empty():
                    waiting.append(queue.get_nowait())
                merged, error = merge_waiting(waiting, [s.kind for s in self.streams])
                for i, output in merged:
                    remaining -= output.finished
                    yield i, output
                if error is not None:
                    raise error
        finally:  # left early (client gone): every prompt's request at once, before the pumps leave theirs
            self.streams[0].engine.abort_streams(self.streams)
            for task in tasks:
                task.cancel()

    async def final_outputs(self) -> list[RequestOutput]:
        """Each prompt's last output, once all have finished."""
        last: list[Any] = [None] * len(self.streams)
        async for i, output in self.outputs():
            last[i] = output
        return last

    def usage(self) -> UsageInfo:
        prompt_tokens = sum(self.num_prompt_tokens)
        completion_tokens = sum(self.num_output_tokens) if self.counts_output else 0
        details = None
        if self.state.config.enable_prompt_tokens_details:
            details = PromptTokensDetails(cached_tokens=sum(self.num_cached_tokens))
        return UsageInfo(
            prompt_tokens=prompt_tokens,
            completion_tokens=completion_tokens,
            total_tokens=prompt_tokens + completion_tokens,
            prompt_tokens_details=details,
        )

    def close(self) -> None:
        """Abort what is unfinished (counted as finished_reason "abort") and release the admission; once."""
        if self.closed:
            return
        self.closed = True
        metrics = self.state.metrics
        for stream, n in zip(self.streams, self.num_completions):
            if not stream.finished:
                metrics.success.labels(metrics.model_name, "abort").inc(n)
        if self.streams:  # one command for all prompts: the core drops them all before its next step
            self.streams[0].engine.abort_streams(self.streams)
        if self.admission is not None:
            self.admission.release()


def merge_waiting(
    waiting: list[tuple[int, Any]], kinds: list[RequestOutputKind]
) -> tuple[list[tuple[int, RequestOutput]], BaseException | None]:
    """(prompt index, output) items that waited for a group's reader as one output per prompt for each
    run of them (prompt i's outputs merged by kinds[i]), up to the first exception (returned beside
    them; what follows it is dropped). A failed request's output (`error` set) ends a run and goes on
    its own, as RequestStream hands it over."""
    merged: list[tuple[int, RequestOutput]] = []
    run: dict[int, list[RequestOutput]] = {}

    def flush() -> None:
        merged.extend((i, merge_outputs(outputs, kinds[i])) for i, outputs in run.items())
        run.clear()

    for i, item in waiting:
        if isinstance(item, BaseException):
            flush()
            return merged, item
        if item.error is not None:
            flush()
            merged.append((i, item))
        else:
            run.setdefault(i, []).append(item)
    flush()
    return merged, None


@asynccontextmanager
async def open_group(state: ServerState, generation: Generation) -> AsyncIterator[RequestGroup]:
    """A started RequestGroup for the block; closed when the block ends, however it ends."""
    group = RequestGroup(state, generation.request_id, generation.counts_output)
    try:
        await group.start(
            generation.token_ids, generation.params, generation.priority, generation.stream, generation.beam_search
        )
        yield group
    finally:
        group.close()


async def respond(request: Request, state: ServerState, generation: Generation, fmt: ResponseFormat) -> Response:
    """Run a generation to its HTTP response.

    Streaming, the group's cleanup moves to the response (it outlives this function); otherwise
    the whole response is awaited while watching for the client to leave (then the engine requests
    are aborted at once, and the access log shows 499, as nginx writes a client that hung up). A
    request the engine failed (NaN logits) or a dead engine is a 500 with the engine's message, one whose
    constraint outgrew the grammar engine's limits a 400 (errors.failure_status).
    """
    async with AsyncExitStack() as cleanup:
        group = await cleanup.enter_async_context(open_group(state, generation))
        if generation.stream:
            options = generation.stream_options or StreamOptions(include_usage=False)
            usage = group.usage if options.include_usage else None
            every_chunk = usage is not None and options.continuous_usage_stats
            events = sse_events(group.outputs(), fmt, usage, group.request_id, every_chunk)
            return ClosingStreamingResponse(events, on_close=cleanup.pop_all())
        try:
            finals = await until_disconnect(request, group.final_outputs())
        except ClientDisconnected:
            return Response(status_code=499)
        except EngineDeadError as exc:
            return error_response(500, str(exc))
        error = next((o.error for o in finals if o.error), None)
        if error:  # the engine failed the request (NaN logits, the grammar engine): logged
            logger.warning("request %s failed: %s", group.request_id, error)
            return error_response(failure_status(error), error)
        return JSONResponse(fmt.response(finals, group.usage()).model_dump())


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
