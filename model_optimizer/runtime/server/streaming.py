"""Server-sent events for a generation: one chunk per output with new tokens, an in-band error on failure,
the usage chunk when asked for, then [DONE] (the Responses API: its typed events, none after them).

An output is one engine step's news while the reader keeps up; when it falls behind, the outputs
that waited are merged into one (RequestStream), so a chunk may carry several tokens per choice
(text, token_ids and logprobs entries alike), as vLLM's do.

The API-specific part (what a chunk looks like for chat or completions) is a `StreamFormat`;
everything else, including the order of events and what happens when the engine fails after
the headers are sent, is written once here.

A stream sends up to one chunk per engine step, and a server streams to every running request at once,
so a chunk's cost is paid up to (batch size) times per step on the event loop, which the engine thread also
needs (the GIL). Chunks are therefore not pydantic models: `ChunkTemplate` serializes the fields
every chunk of a stream shares (id, object, created, model) once, and each chunk adds only its
choices, plain dicts through msgspec's JSON encoder (logprobs may be JSON already: msgspec.Raw, see
logprobs_json.py): the bytes pydantic writes, several times cheaper.
"""

from __future__ import annotations

import json
import logging
from collections.abc import AsyncIterator, Callable
from contextlib import AsyncExitStack
from dataclasses import dataclass
from typing import Protocol

import msgspec
from pydantic import BaseModel
from starlette.responses import StreamingResponse
from starlette.types import Receive, Scope, Send

from model_optimizer.runtime.engine.async_engine import EngineDeadError
from model_optimizer.runtime.engine.outputs import CompletionOutput, Logprob, RequestOutput
from model_optimizer.runtime.server.errors import error_body, failure_status
from model_optimizer.runtime.server.protocol_outputs import UsageInfo

logger = logging.getLogger(__name__)
DONE = "data: [DONE]\n\n"


def sse(payload: BaseModel | dict) -> str:
    """One server-sent event; a payload with an `event_name` (the Responses API's events) also names it on
    an `event:` line, as OpenAI's streams of typed events do."""
    data = payload.model_dump_json() if isinstance(payload, BaseModel) else json.dumps(payload)
    name = getattr(payload, "event_name", None)
    return f"event: {name}\ndata: {data}\n\n" if name else f"data: {data}\n\n"


_encode = msgspec.json.Encoder().encode


class ChunkTemplate:
    """The SSE event of a stream chunk from its choices (plain dicts), around a base chunk serialized once.

    `base` is the stream's chunk model with no choices (CompletionResponse, ChatCompletionChunk); its
    other fields are the same in every chunk. The choices go through msgspec's encoder, which spells
    strings as pydantic does, and floats too short of 1e16 (a chunk's only floats are logprobs, at most
    0; a non-finite float is null in both), without building a model per choice: the event is byte for
    byte what `sse(base with these choices)` gives, several times faster."""

    MARKER = b'"choices":[]'  # a key: inside a JSON string its quotes would be escaped

    def __init__(self, base: BaseModel) -> None:
        text = base.model_dump_json().encode()
        at = text.index(self.MARKER)
        self.head = b"data: " + text[: at + len(self.MARKER) - 2]
        self.tail = text[at + len(self.MARKER) :] + b"\n\n"

    def event(self, choices: list[dict]) -> bytes:
        return self.head + _encode(choices) + self.tail


NO_USAGE = b'"usage":null}'


def with_usage(event: bytes, usage: UsageInfo) -> bytes:
    """A chunk's SSE event (ChunkTemplate's: usage is the chunk's last field, null) with `usage` set."""
    at = event.rindex(NO_USAGE)
    return event[:at] + b'"usage":' + usage.model_dump_json().encode() + event[at + len(NO_USAGE) - 1 :]


@dataclass
class ChoiceDelta:
    """What is new in one choice since its last chunk (a DELTA completion, with its place in the text)."""

    prompt_index: int
    completion: CompletionOutput
    """The engine's delta: new text, token ids and logprobs; finish_reason on its last one."""
    first: bool
    """This is the choice's first chunk."""
    prompt_logprobs: list | None = None
    """The output's prompt logprobs (those not handed out before; see RequestOutput.prompt_logprobs)."""

    @property
    def text(self) -> str:
        return self.completion.text

    @property
    def logprobs(self) -> list[Logprob] | None:
        return self.completion.logprobs


class SeenChoices:
    """The (prompt, choice) pairs that have had a chunk: the first carries echo's text."""

    def __init__(self) -> None:
        self.sent: set[tuple[int, int]] = set()

    def deltas(self, prompt_index: int, output: RequestOutput) -> list[ChoiceDelta]:
        """The choices of a DELTA output with something to send: new tokens, or their finish. A token whose
        text is empty (no tokenizer, or text held back as half of a multibyte character) still makes a
        chunk: a chunk per output is what lets a client time TTFT and ITL on any model."""
        out = []
        for completion in output.outputs:
            if not completion.token_ids and not completion.text and not completion.finished():
                continue
            key = (prompt_index, completion.index)
            first = key not in self.sent
            self.sent.add(key)
            out.append(ChoiceDelta(prompt_index, completion, first, output.prompt_logprobs))
        return out


class StreamFormat(Protocol):
    """How one API shapes its stream's chunks (chat and completions differ only here)."""

    def head(self) -> list[BaseModel]:
        """Chunks sent before any output (chat's role chunk); may be empty."""

    def chunk(self, deltas: list[ChoiceDelta]) -> bytes | None:
        """The SSE event of one chunk carrying these choices' news (see ChunkTemplate); None when no
        choice has any (a parser holding text back), so that no empty chunk is sent."""

    def usage_chunk(self, usage: UsageInfo) -> BaseModel:
        """The last chunk, with no choices, when the client asked for stream_options.include_usage."""

    def failure(self, message: str) -> str:
        """The event that tells the client the generation failed after the headers went out."""

    last: str
    """The stream's last line, after everything else (DONE), or "" for none."""


class ErrorThenDone:
    """The end of chat's and completions' streams, as OpenAI's and vLLM's: an in-band error body when the
    generation fails, and [DONE] last."""

    last = DONE

    def failure(self, message: str) -> str:
        return sse(error_body(failure_status(message), message))


async def sse_events(
    outputs: AsyncIterator[tuple[int, RequestOutput]],
    fmt: StreamFormat,
    usage: Callable[[], UsageInfo] | None,
    request_id: str,
    usage_every_chunk: bool = False,
) -> AsyncIterator[str | bytes]:
    """The SSE lines of a generation from its DELTA outputs: head, chunks, then usage (when `usage` is
    given) and the format's last line. `usage_every_chunk` (vLLM's continuous_usage_stats) puts `usage()` on
    each chunk.

    The headers are already sent when anything fails, so a failure becomes the format's failure event (an
    OpenAI error body, or the Responses API's response.failed) and the stream ends as usual: clients see
    why it ended early.
    """
    every = usage if usage_every_chunk else None
    for chunk in fmt.head():
        yield sse(chunk if every is None else chunk.model_copy(update={"usage": every()}))
    seen = SeenChoices()
    try:
        async for prompt_index, output in outputs:
            if output.error:
                logger.warning("request %s failed: %s", request_id, output.error)
                yield fmt.failure(output.error)
                break
            deltas = seen.deltas(prompt_index, output)
            if deltas and (event := fmt.chunk(deltas)) is not None:
                yield event if every is None else with_usage(event, every())
        else:
            if usage is not None:
                yield sse(fmt.usage_chunk(usage()))
    except EngineDeadError as exc:
        yield fmt.failure(str(exc))
    except Exception as exc:  # noqa: BLE001 - headers are sent: the client learns of it in-band
        logger.exception("stream %s failed", request_id)
        yield fmt.failure(f"internal error: {type(exc).__name__}")
    if fmt.last:
        yield fmt.last


class ClosingStreamingResponse(StreamingResponse):
    """An SSE response that runs `on_close` however the stream ends, even when it never started
    (the client left before the first byte): the request group it streams is released exactly once."""

    def __init__(self, content: AsyncIterator[str | bytes], on_close: AsyncExitStack) -> None:
        super().__init__(content, media_type="text/event-stream", headers={"Cache-Control": "no-cache"})
        self.on_close = on_close

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        try:
            await super().__call__(scope, receive, send)
        finally:
            await self.body_iterator.aclose()  # type: ignore[union-attr]
            await self.on_close.aclose()
