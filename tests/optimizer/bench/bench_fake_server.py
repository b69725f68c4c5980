"""A second small real server for bench tests: what other engines do differently, picked per URL.

Modes come from a path prefix, `/m/<mode,mode>/v1/...` (plain `/v1/...`: a well-behaved server):
"nousage" sends no usage; "multi" puts two words (" the cat") in every chunk; "json" answers a
stream with one application/json body; "401" refuses every generation; "deny-models" refuses GET
/v1/models too. GET /v1/models lists "fake-model" with `root` = the app's `root` (a tokenizer folder).
Every generation request's headers and body are kept in `app.state.seen`, its arrival in the valve.
"""

from __future__ import annotations

import asyncio
import json

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, StreamingResponse

from tests.optimizer.bench.stream_server import Valve

WORDS = " the cat"
"""The text of a "multi" chunk: two tokens for common BPE vocabularies."""


def create_fake_app(root: str | None = None, itl: float = 0.0) -> FastAPI:
    app = FastAPI()
    app.state.seen = []  # (headers, body) of each generation request
    app.state.models_headers = []  # headers of each GET /v1/models
    app.state.valve = Valve()

    @app.get("/v1/models")
    @app.get("/m/{mode}/v1/models")
    async def models(request: Request, mode: str = ""):
        app.state.models_headers.append(dict(request.headers))
        if "deny-models" in mode.split(","):
            return JSONResponse({"error": {"message": "bad key"}}, 401)
        return {"object": "list", "data": [{"id": "fake-model", "object": "model", "root": root}]}

    @app.post("/v1/completions")
    @app.post("/m/{mode}/v1/completions")
    async def completions(request: Request, mode: str = ""):
        modes = set(mode.split(","))
        body = await request.json()
        app.state.seen.append((dict(request.headers), body))
        if "401" in modes:
            await app.state.valve.arrive()
            app.state.valve.done()
            return JSONResponse({"error": {"message": "Incorrect API key"}}, 401)
        if "json" in modes:
            return JSONResponse({"id": "x", "choices": [{"index": 0, "text": "whole answer"}]})
        return StreamingResponse(_stream(app, body, modes, itl), media_type="text/event-stream")

    return app


async def _stream(app: FastAPI, body: dict, modes: set[str], itl: float):
    valve: Valve = app.state.valve
    counted_out = False
    try:
        await valve.arrive()
        n = int(body.get("max_tokens", 4))
        for i in range(n):
            if itl:
                await asyncio.sleep(itl)
            text = WORDS if "multi" in modes else f" t{i}"
            yield "data: " + json.dumps({"id": "x", "choices": [{"index": 0, "text": text}]}) + "\n\n"
        if "nousage" not in modes:
            usage = {"prompt_tokens": 8, "completion_tokens": n * (2 if "multi" in modes else 1), "total_tokens": 0}
            yield "data: " + json.dumps({"id": "x", "choices": [], "usage": usage}) + "\n\n"
        counted_out = True
        valve.done()
        yield "data: [DONE]\n\n"
    finally:
        if not counted_out:
            valve.done()
