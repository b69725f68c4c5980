"""The HTTP client: where to send (`ClientConfig`) and `BenchClient`, timing every streamed chunk.

Each request records (record.py) when the load generator wanted to send it, when it was sent, when
each token-carrying chunk arrived, when it ended, how many tokens came back and, if it failed, why.
Times are seconds from the start of the run (time.perf_counter based). What the chunks carry is
read by chunks.py; this module owns the connections and the clock.
"""

from __future__ import annotations

import asyncio
import json
import math
import ssl
import time
from dataclasses import dataclass
from typing import Literal

import httpx

from model_optimizer.optimizer.bench.chunks import (
    StreamError,
    chunk_tokens,
    count_tokens,
    error_message,
    num_logprobs,
    parse_chunk,
    read_usage,
    text_field,
    token_count,
)
from model_optimizer.optimizer.bench.record import RequestRecord
from model_optimizer.optimizer.bench.request_options import (
    extra_body_of,
    extra_headers,
    request_body,
    request_headers,
    response_format_of,
)
from model_optimizer.optimizer.bench.stopping import RunStop
from model_optimizer.optimizer.bench.workloads import BenchRequest
from model_optimizer.runtime.config import check_choice

# RequestRecord lived here before record.py: the tuner, tests and benchmarks still import it from here
__all__ = ["PATHS", "BenchClient", "ClientConfig", "RequestRecord", "check_base_url"]

SHARD_SIZE = 8
"""Connections per httpx client in a closed loop."""
OPEN_LOOP_SHARDS = 8
"""httpx clients an open loop spreads its requests over."""

PATHS = {
    "completions": "/v1/completions",
    "chat": "/v1/chat/completions",
    "responses": "/v1/responses",
    "embeddings": "/v1/embeddings",
}
RESPONSES_DONE = {"response.completed", "response.incomplete", "response.failed"}
"""A Responses stream's last event (OpenAI sends no [DONE] after it)."""
RESPONSES_TOKENS = {
    "response.output_text.delta",
    "response.reasoning_text.delta",
    "response.function_call_arguments.delta",
}
"""Responses stream events that carry generated text."""


@dataclass
class ClientConfig:
    """Where and how to send requests."""

    base_url: str = "http://127.0.0.1:8000"
    """Server root (the part before /v1)."""

    endpoint: Literal["completions", "chat", "responses", "embeddings"] = "completions"
    """API to measure: streamed /v1/completions, /v1/chat/completions or /v1/responses, or /v1/embeddings."""

    model: str | None = None
    """Model name sent in each request. Empty: the first model listed by GET /v1/models."""

    api_key: str | None = None
    """Bearer token sent as Authorization header (default: $OPENAI_API_KEY when set)."""

    ignore_eos: bool = True
    """Ask the server to keep generating past end-of-sequence so outputs have the requested length (vLLM extension)."""

    temperature: float | None = None
    """Sampling temperature sent with each request (default: the server's)."""

    request_timeout: float = 600.0
    """Seconds a request may take in all, from send to its last chunk, before it counts as a timeout error."""

    return_token_ids: bool = False
    """Send return_token_ids (vLLM): chunks with ids but no text then count as tokens. Off: OpenAI refuses it."""

    logprobs: int | None = None
    """Ask for this many top logprobs per token on every request (measures their cost). Empty: none."""

    json_schema: str | None = None
    """JSON schema file: every request asks for output valid against it (response_format json_schema; measures structured outputs). Empty: none."""

    response_format: str | None = None
    """JSON file holding a whole response_format object (json_object, json_schema ...) sent with every request. Empty: none."""

    header: list[str] | None = None
    """HTTP header sent with every request and GET /v1/models, KEY=VALUE; repeat the flag for several (a gateway's routing or auth header)."""

    extra_body: str | None = None
    """JSON object merged into every request body (fields the bench does not send itself, e.g. '{"top_k": 20}'); its keys win."""

    def __post_init__(self) -> None:
        check_choice(self, "endpoint")
        if self.json_schema and self.response_format:
            raise ValueError("give json_schema or response_format, not both")
        response_format_of(self)  # a missing file or bad JSON fails before any request is sent
        extra_headers(self)
        extra_body_of(self)
        check_base_url(self.base_url, "base_url")
        self.base_url = self.base_url.rstrip("/").removesuffix("/v1")
        if not (self.request_timeout > 0):  # NaN too: it reached the first request as httpx's "deadline" error
            raise ValueError(f"request_timeout must be positive, got {self.request_timeout}")
        # checked here: the server refuses each request with HTTP 400, so a run would only record errors
        if self.temperature is not None and not (0 <= self.temperature < math.inf):  # NaN fails both sides
            raise ValueError(f"--temperature must be a finite number >= 0, got {self.temperature}")
        if self.logprobs is not None and self.logprobs < 0:
            raise ValueError(f"--logprobs must be an integer >= 0, got {self.logprobs}")


def check_base_url(url: str, name: str) -> None:
    """A ValueError unless `url` is an http(s) URL with a host and a valid port: a port such as 99999 or
    an unclosed `[` otherwise reached httpx or the socket as a traceback after the run had started."""
    if not url.startswith(("http://", "https://")):
        raise ValueError(f"{name} must start with http:// or https://, got {url!r}")
    try:
        parsed = httpx.URL(url)
    except httpx.InvalidURL as exc:
        raise ValueError(f"{name} is not a valid URL ({exc}): {url!r}") from None
    if not parsed.host:
        raise ValueError(f"{name} has no host: {url!r}")
    if parsed.port is not None and not 0 < parsed.port <= 65535:
        raise ValueError(f"{name} has port {parsed.port}, outside 1-65535: {url!r}")


class BenchClient:
    """Send prepared requests and time them; use as `async with BenchClient(cfg, slots, t0) as c`.

    httpx's connection pool scans all its connections on every request, so one pool of hundreds
    of connections costs the client milliseconds per request; the connections are spread over
    several small clients (shards) instead. With `slots` (closed loop), request slot k always
    uses shard k % num_shards, whose pool is sized to exactly its slots.
    """

    def __init__(self, cfg: ClientConfig, slots: int | None, t0: float, stop: RunStop | None = None) -> None:
        self.cfg = cfg
        self.t0 = t0
        self.stop = stop or RunStop()
        self.url = cfg.base_url + PATHS[cfg.endpoint]
        self.streaming = cfg.endpoint != "embeddings"
        headers = {"Content-Type": "application/json"} | request_headers(cfg)
        num_shards = math.ceil(slots / SHARD_SIZE) if slots else OPEN_LOOP_SHARDS
        per_shard = math.ceil(slots / num_shards) if slots else None
        limits = httpx.Limits(max_connections=per_shard, max_keepalive_connections=per_shard)
        verify = _ssl_context() if cfg.base_url.startswith("https://") else False  # one context, built once
        # no httpx timeout: its read timeout restarts at every chunk, so a stream that never pauses long
        # would never time out; send() puts one deadline on the whole request instead
        self.shards = [
            httpx.AsyncClient(http1=True, limits=limits, timeout=None, headers=headers, verify=verify)
            for _ in range(num_shards)
        ]

    async def __aenter__(self) -> BenchClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        for shard in self.shards:
            await shard.aclose()

    def body(self, req: BenchRequest) -> bytes:
        """The JSON body for `req`, encoded ahead of the run so sending costs no serialization."""
        return request_body(self.cfg, req)

    async def send(
        self, index: int, req: BenchRequest, body: bytes, scheduled: float, slot: int | None = None
    ) -> RequestRecord:
        """Send one request (from `slot` in a closed loop) and return its record; never raises for request failures.

        `request_timeout` bounds the whole request (send to last chunk), not each read."""
        http = self.shards[(index if slot is None else slot) % len(self.shards)]
        rec = RequestRecord(index, req.prompt_len, req.output_len, scheduled=scheduled - self.t0)
        rec.send = time.perf_counter() - self.t0
        task = asyncio.current_task()
        self.stop.track(task)
        try:
            await asyncio.wait_for(self._exchange(http, body, rec), self.cfg.request_timeout)
        except asyncio.CancelledError:
            if not self.stop.cancelling:
                raise
            task.uncancel()  # type: ignore[union-attr]  # ours: the request ends as a record, its task goes on
            rec.error = "cancelled"
            rec.error_detail = f"still in flight when the run stopped ({self.stop.reason})"
        except asyncio.TimeoutError:  # TimeoutError itself from Python 3.11 on
            rec.error = "timeout"
            rec.error_detail = f"no complete answer within --request-timeout {self.cfg.request_timeout:g} s"
        except (httpx.NetworkError, httpx.RemoteProtocolError) as exc:
            rec.error, rec.error_detail = "connection", repr(exc)
        except StreamError as exc:
            rec.error, rec.error_detail = exc.kind, str(exc)[:300]
        except httpx.HTTPError as exc:
            rec.error, rec.error_detail = "other", repr(exc)
        finally:
            self.stop.untrack(task)
        rec.end = time.perf_counter() - self.t0
        if rec.error != "cancelled":
            self.stop.observe(rec.error)
        return rec

    async def _exchange(self, http: httpx.AsyncClient, body: bytes, rec: RequestRecord) -> None:
        """POST `body` and read the whole answer into `rec`."""
        async with http.stream("POST", self.url, content=body) as resp:
            if resp.status_code != 200:
                text = (await resp.aread()).decode(errors="replace")
                rec.error, rec.error_detail = f"http_{resp.status_code}", error_message(text)[:300]
            elif self.streaming and resp.headers.get("content-type", "").startswith("application/json"):
                text = (await resp.aread()).decode(errors="replace")
                raise StreamError(
                    "malformed_stream",
                    f"asked for a stream (text/event-stream), the answer has Content-Type "
                    f"{resp.headers['content-type']}: {' '.join(text.split())[:200]}",
                )
            elif self.streaming:
                await self._read_stream(resp, rec)
            else:
                self._read_embedding(await resp.aread(), rec)

    async def _read_stream(self, resp: httpx.Response, rec: RequestRecord) -> None:
        if self.cfg.endpoint == "responses":
            return await self._read_events(resp, rec)
        chat = self.cfg.endpoint == "chat"
        finished = False
        pending = b""
        counted: list[int | None] = []  # per token chunk: its tokens, when its ids or logprobs say
        texts: list[str] = []  # per token chunk: its text
        # after [DONE], read on to the end of the body: leaving it unread would close the
        # keep-alive connection and make the next request pay for a new one
        async for data in resp.aiter_bytes():
            arrived = time.perf_counter() - self.t0  # every event in one network read arrived together
            *lines, pending = (pending + data).split(b"\n")
            for line in lines:
                if finished or not line.startswith(b"data:"):
                    continue  # also blank separators, comments and event: lines
                payload = line[5:].strip()
                if payload == b"[DONE]":
                    finished = True
                    continue
                chunk = parse_chunk(payload)
                text, ids = chunk_tokens(chunk, chat)
                if text or ids:
                    rec.chunk_times.append(arrived)
                    counted.append(len(ids) if ids is not None else num_logprobs(chunk, chat))
                    texts.append(text)
                read_usage(chunk.get("usage"), rec, "completion_tokens", "prompt_tokens")
        if not finished:
            raise StreamError("malformed_stream", "stream ended without data: [DONE]")
        count_tokens(rec, counted, texts)

    async def _read_events(self, resp: httpx.Response, rec: RequestRecord) -> None:
        """A Responses API stream: text deltas are the token events, the last event (completed, incomplete
        or failed) carries the usage; a [DONE] after it (as this server sends) is read and ignored."""
        finished = False
        pending = b""
        counted: list[int | None] = []
        texts: list[str] = []
        async for data in resp.aiter_bytes():
            arrived = time.perf_counter() - self.t0
            *lines, pending = (pending + data).split(b"\n")
            for line in lines:
                if finished or not line.startswith(b"data:") or line[5:].strip() == b"[DONE]":
                    continue
                event = parse_chunk(line[5:].strip())
                kind = text_field(event.get("type"), "type")  # a list or object would not even hash
                if kind == "error":  # OpenAI's in-band error event
                    raise StreamError("stream_error", str(event.get("message") or event)[:300])
                if kind in RESPONSES_TOKENS:
                    text = text_field(event.get("delta"), "delta")
                    if text:
                        rec.chunk_times.append(arrived)
                        logprobs = event.get("logprobs")
                        counted.append(len(logprobs) if isinstance(logprobs, list) and logprobs else None)
                        texts.append(text)
                elif kind in RESPONSES_DONE:
                    finished = True
                    response = event.get("response") if isinstance(event.get("response"), dict) else {}
                    if kind == "response.failed":
                        raise StreamError("stream_error", json.dumps(response.get("error"))[:300])
                    read_usage(response.get("usage"), rec, "output_tokens", "input_tokens")
        if not finished:
            raise StreamError("malformed_stream", "stream ended before response.completed (or incomplete, failed)")
        count_tokens(rec, counted, texts)

    def _read_embedding(self, raw: bytes, rec: RequestRecord) -> None:
        try:
            body = json.loads(raw)
        except json.JSONDecodeError:
            body = None
        if not isinstance(body, dict):
            raise StreamError("malformed_stream", f"embeddings response is not a JSON object: {raw[:100]!r}")
        if not isinstance(body.get("data"), list) or not body["data"]:
            raise StreamError("malformed_stream", "embeddings response without data")
        usage = body.get("usage")
        if isinstance(usage, dict) and "prompt_tokens" in usage:
            rec.prompt_tokens = token_count(usage, "prompt_tokens")
            rec.usage_reported = True
            rec.token_count_source = "usage"


def _ssl_context() -> ssl.SSLContext:
    import certifi  # httpx's own source of CA certificates

    return ssl.create_default_context(cafile=certifi.where())
