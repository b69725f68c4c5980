"""A small real OpenAI-style server for bench tests: streams tokens with known delays.

The model name picks the behaviour: "tiny" answers normally; "fail-500" returns HTTP 500;
"broken" sends a chunk that is not JSON; "no-done" ends the stream without [DONE];
"no-usage" never reports usage (on /v1/responses "no-done" sends no closing event, "error-event" an
error event, "failed-null" a response.failed without its response); "ids-only" sends no text and no usage, only `token_ids`, two per
chunk (as a server streaming a model without a tokenizer). "reasoning" (chat) streams its tokens as a
reasoning model does: `delta.reasoning`, `delta.reasoning_content`, a tool call's name and argument
fragments, then `delta.content`; "error-null" sends `"error": null` in every chunk, as some servers
do; "null-usage", "bad-text" and "bad-delta" send one malformed field (usage.completion_tokens null, a
number as the text, a string as the chat delta); "json-stream" answers a stream with one application/json body. Delays come from the app's `settings` (seconds).

`app.state.valve` (a Valve) records every generation request's arrival and can hold their
responses until the test lets them through, so load tests assert on arrivals and in-flight
counts that the test itself controls, not on how fast this machine happens to be.
"""

from __future__ import annotations

import asyncio
import json
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager

import uvicorn
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, PlainTextResponse, StreamingResponse

MODELS = (
    "tiny", "fail-500", "broken", "no-done", "no-usage", "error-event", "failed-null", "ids-only", "reasoning",
    "error-null", "null-usage", "bad-text", "bad-delta", "json-stream",
)  # fmt: skip
"""Every model name above, as GET /v1/models lists them (`mopt bench` refuses a --model not listed)."""


class Valve:
    """Arrivals of generation requests, and a hold on their responses; thread-safe.

    A held request has arrived (it is counted in `arrivals` and `in_flight`) but sends no chunk
    (its headers only) until `release` or `open` lets it go, oldest first. A request is in
    flight from its arrival until just before its last chunk (`[DONE]`) is sent, so a client can
    never start its next request before the server counted the previous one out.
    """

    def __init__(self) -> None:
        self._cv = threading.Condition()
        self._held = False
        self._credit = 0
        self._waiting: list[tuple[asyncio.AbstractEventLoop, asyncio.Future]] = []
        self.arrivals: list[float] = []
        """perf_counter() at each arrival (the test's process shares the clock)."""
        self.in_flight = 0
        self.max_in_flight = 0
        self.num_finished = 0

    # ----------------------------------------------------------------- test side
    def hold(self) -> None:
        """Hold the responses of requests that arrive from now on."""
        with self._cv:
            self._held, self._credit = True, 0

    def release(self, count: int = 1) -> None:
        """Let the `count` oldest held responses go (those arriving later use what is left over)."""
        with self._cv:
            self._credit += count
            self._let_go()

    def open(self) -> None:
        """Stop holding; every held response goes now."""
        with self._cv:
            self._held = False
            self._credit += len(self._waiting)
            self._let_go()

    @contextmanager
    def held(self) -> Iterator[Valve]:
        self.hold()
        try:
            yield self
        finally:
            self.open()

    def reset(self) -> None:
        """Forget arrivals and maxima (between tests; the server must be idle)."""
        with self._cv:
            self.arrivals.clear()
            self.max_in_flight = self.in_flight
            self.num_finished = 0

    def wait_arrivals(self, count: int, timeout: float = 120.0) -> None:
        """Block until `count` requests have arrived in all; fail after `timeout` s (a bound on a hang)."""
        with self._cv:
            if not self._cv.wait_for(lambda: len(self.arrivals) >= count, timeout):
                raise AssertionError(f"{len(self.arrivals)} request(s) arrived, waited for {count}")

    @property
    def num_held(self) -> int:
        with self._cv:
            return len(self._waiting)

    # ----------------------------------------------------------------- server side
    async def arrive(self) -> None:
        """Count an arrival; return once the response may proceed."""
        loop = asyncio.get_running_loop()
        with self._cv:
            self.arrivals.append(time.perf_counter())
            self.in_flight += 1
            self.max_in_flight = max(self.max_in_flight, self.in_flight)
            self._cv.notify_all()
            if not self._held:
                return
            if self._credit:
                self._credit -= 1
                return
            go = loop.create_future()
            self._waiting.append((loop, go))
        await go

    def done(self) -> None:
        """The request's response is about to send its last chunk (or it failed)."""
        with self._cv:
            self.in_flight -= 1
            self.num_finished += 1
            self._cv.notify_all()

    def _let_go(self) -> None:
        while self._credit and self._waiting:
            self._credit -= 1
            loop, go = self._waiting.pop(0)
            loop.call_soon_threadsafe(lambda f=go: f.done() or f.set_result(None))


def create_app(ttft: float = 0.05, itl: float = 0.02) -> FastAPI:
    app = FastAPI()
    app.state.settings = {"ttft": ttft, "itl": itl}
    app.state.counters = {"requests": 0, "running": 0}
    app.state.valve = Valve()
    app.state.client_ports = []  # one entry per request: the client's TCP port tells connections apart
    app.state.prompts = []  # the prompt of every generation request, in arrival order

    @app.get("/v1/models")
    async def models() -> dict:
        return {"object": "list", "data": [{"id": name, "object": "model"} for name in MODELS]}

    @app.get("/metrics")
    async def metrics() -> PlainTextResponse:
        c = app.state.counters
        text = (
            "# TYPE vllm:num_preemptions counter\n"
            f'vllm:num_preemptions_total{{model_name="tiny"}} {c["requests"] // 4}\n'
            "# TYPE vllm:prefix_cache_queries counter\n"
            f'vllm:prefix_cache_queries_total{{model_name="tiny"}} {c["requests"] * 100}\n'
            "# TYPE vllm:prefix_cache_hits counter\n"
            f'vllm:prefix_cache_hits_total{{model_name="tiny"}} {c["requests"] * 25}\n'
            "# TYPE vllm:kv_cache_usage_perc gauge\n"
            f'vllm:kv_cache_usage_perc{{model_name="tiny"}} {min(1.0, c["running"] / 10)}\n'
        )
        return PlainTextResponse(text)

    @app.post("/v1/completions")
    async def completions(request: Request):
        app.state.client_ports.append(request.client.port)
        return await _generate(app, await request.json(), chat=False)

    @app.post("/v1/chat/completions")
    async def chat(request: Request):
        return await _generate(app, await request.json(), chat=True)

    @app.post("/v1/responses")
    async def responses(request: Request):
        return await _respond_events(app, await request.json())

    @app.post("/v1/embeddings")
    async def embeddings(request: Request):
        body = await request.json()
        if body.get("model") == "fail-500":
            return JSONResponse({"error": {"message": "boom"}}, status_code=500)
        await asyncio.sleep(app.state.settings["ttft"])
        n = len(body["input"]) if isinstance(body["input"], list) else len(body["input"].split())
        return {
            "object": "list",
            "data": [{"index": 0, "embedding": [0.1, 0.2]}],
            "usage": {"prompt_tokens": n, "total_tokens": n},
        }

    return app


async def _generate(app: FastAPI, body: dict, chat: bool):
    model = body.get("model")
    if model == "fail-500":
        return JSONResponse({"error": {"message": "internal error"}}, status_code=500)
    if model == "json-stream":  # a server that ignores stream: true
        return JSONResponse({"id": "x", "choices": [{"index": 0, "text": "whole answer"}]})
    settings, counters = app.state.settings, app.state.counters
    counters["requests"] += 1
    n = int(body.get("max_tokens", 16))
    prompt = body["messages"][0]["content"] if chat else body["prompt"]
    app.state.prompts.append(prompt)
    prompt_tokens = len(prompt) if isinstance(prompt, list) else len(prompt.split())
    wants_usage = bool((body.get("stream_options") or {}).get("include_usage"))
    include_usage = wants_usage and model not in ("no-usage", "ids-only")

    def chunk(text: str | None, usage: dict | None = None, i: int = 0) -> str:
        if chat:
            delta = _delta(model, i, text) if text else {"role": "assistant"}
            choices = [] if usage else [{"index": 0, "delta": delta}]
        else:
            choices = [] if usage else [{"index": 0, "text": 7 if model == "bad-text" and i == 1 else text}]
        fields = {"id": "x", "choices": choices, "usage": usage}
        return "data: " + json.dumps(fields | ({"error": None} if model == "error-null" else {})) + "\n\n"

    valve: Valve = app.state.valve

    async def stream():
        counters["running"] += 1
        counted_out = False
        try:
            await valve.arrive()
            if chat:
                yield chunk(None)  # role-only first chunk, no content: must not count as the first token
            await asyncio.sleep(settings["ttft"])
            for i in range(n):
                if i:
                    await asyncio.sleep(settings["itl"])
                if model == "broken" and i == 1:
                    counted_out = True
                    valve.done()
                    yield "data: {not json\n\n"
                    return
                if model == "ids-only":
                    if i % 2:
                        yield _ids_chunk([1000 + i - 1, 1000 + i], chat)
                    continue
                yield chunk(f" t{i}", i=i)
            if include_usage:
                completion = None if model == "null-usage" else n
                usage = {
                    "prompt_tokens": prompt_tokens,
                    "completion_tokens": completion,
                    "total_tokens": prompt_tokens + n,
                }
                yield chunk(None, usage)
            counted_out = True
            valve.done()  # before the last chunk: the client cannot react to it before this count
            if model != "no-done":
                yield "data: [DONE]\n\n"
        finally:
            counters["running"] -= 1
            if not counted_out:
                valve.done()

    return StreamingResponse(stream(), media_type="text/event-stream")


async def _respond_events(app: FastAPI, body: dict):
    """A Responses API stream as OpenAI sends it: `event:` lines, numbered events, no [DONE] at the end;
    "no-done" (here: no closing event) ends the body after the text."""
    model, settings = body.get("model"), app.state.settings
    n = int(body.get("max_output_tokens", 16))
    app.state.prompts.append(body["input"])

    def event(kind: str, **fields) -> str:
        return f"event: {kind}\ndata: " + json.dumps({"type": kind, **fields}) + "\n\n"

    async def stream():
        yield event("response.created", response={"id": "resp_x", "status": "in_progress"})
        await asyncio.sleep(settings["ttft"])
        for i in range(n):
            if i:
                await asyncio.sleep(settings["itl"])
            yield event("response.output_text.delta", item_id="msg_x", output_index=0, content_index=0, delta=f" t{i}")
        if model == "error-event":
            yield event("error", code="server_error", message="the model fell over", param=None)
        elif model == "failed-null":
            yield event("response.failed", response=None)
        elif model != "no-done":
            usage = {"input_tokens": len(body["input"].split()), "output_tokens": n}
            yield event("response.completed", response={"id": "resp_x", "status": "completed", "usage": usage})

    return StreamingResponse(stream(), media_type="text/event-stream")


def _delta(model: str, i: int, text: str) -> dict | str:
    """Token i's chat delta: the answer's text, or for "reasoning" the field a reasoning model puts it in
    (reasoning, reasoning_content, both at once, a tool call's name, its arguments, then the answer)."""
    if model == "bad-delta" and i == 1:
        return text
    if model != "reasoning":
        return {"content": text}
    call = {"index": 0, "id": "call_0", "type": "function", "function": {"name": "lookup", "arguments": ""}}
    kinds = [
        {"reasoning": text},
        {"reasoning_content": text},
        {"reasoning": text, "reasoning_content": text},  # a server sending both names, as vLLM did for a while
        {"tool_calls": [call]},
        {"tool_calls": [{"index": 0, "function": {"arguments": text}}]},
    ]
    return kinds[i] if i < len(kinds) else {"content": text}


def _ids_chunk(token_ids: list[int], chat: bool) -> str:
    """A chunk with token ids and empty text."""
    choice = {"index": 0, "delta": {"content": ""}} if chat else {"index": 0, "text": ""}
    return "data: " + json.dumps({"id": "x", "choices": [choice | {"token_ids": token_ids}]}) + "\n\n"


class ServerThread:
    """Run an app with uvicorn on 127.0.0.1 and an OS-chosen port, in a background thread."""

    def __init__(self, app: FastAPI) -> None:
        self.app = app
        config = uvicorn.Config(app, host="127.0.0.1", port=0, log_level="warning", lifespan="off")
        self.server = uvicorn.Server(config)
        self.thread = threading.Thread(target=self.server.run, daemon=True)

    def __enter__(self) -> ServerThread:
        self.thread.start()
        deadline = time.monotonic() + 60  # a bound on a hang, not a speed
        while not self.server.started:
            if time.monotonic() > deadline or not self.thread.is_alive():
                raise RuntimeError("test server did not start")
            time.sleep(0.01)
        port = self.server.servers[0].sockets[0].getsockname()[1]
        self.base_url = f"http://127.0.0.1:{port}"
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.should_exit = True
        self.thread.join(timeout=10)
