"""POST /pause, POST /resume, GET /is_paused (served with --enable-pause): hold generation without dropping requests;
and POST /reset_prefix_cache: make the engine forget its cached prompt prefixes.

Paused, the engine runs no step; requests already running keep their KV blocks and resume where they
stopped, new requests are admitted and queued, aborts (a client leaving, a drain timing out) still
free their blocks, and SIGTERM still drains (it resumes the engine; /pause answers 503 from then on).
/pause returns once no step is running, so whatever the caller does next (swap weights, inspect state)
sees a still engine. All need the API key when
one is set. The engine core's StepGate does the holding, in its process or thread (engine/core_loop.py).

/reset_prefix_cache (vLLM's route) serves a benchmark that wants a cold cache for each run, and a weight update
(pause, new weights, reset, resume). It rides on the same flag: vLLM serves both only in its dev mode, and
whoever reaches it can make every later prompt compute its prefix again. It works while paused.
"""

from __future__ import annotations

from fastapi import APIRouter, Request

from model_optimizer.runtime.engine.async_engine import AsyncEngine
from model_optimizer.runtime.server.errors import APIError
from model_optimizer.runtime.server.routes import ERROR_RESPONSES
from model_optimizer.runtime.server.state import RETRY_AFTER_S, ServerState, get_state

router = APIRouter()
PARK_TIMEOUT_S = 60.0
"""Longest /pause waits for the step in progress to end (a bound on a hang, not an expected wait)."""
RESET_TIMEOUT_S = 60.0
"""Longest /reset_prefix_cache waits for the core to apply it, between two steps (a bound on a hang)."""


@router.post("/pause", responses=ERROR_RESPONSES)
async def pause(request: Request) -> dict:
    """Hold the engine before its next step; returns {"is_paused": true} once no step runs. 503 while the
    server drains: a drain lets running requests finish, which a held engine would keep them from."""
    state = get_state(request)
    engine = _engine(state)
    if state.draining:
        raise APIError(503, "the server is shutting down", headers={"Retry-After": RETRY_AFTER_S})
    await engine.pause(PARK_TIMEOUT_S)
    return {"is_paused": True}


@router.post("/resume", responses=ERROR_RESPONSES)
async def resume(request: Request) -> dict:
    """Let the engine step again (a no-op when it is not paused)."""
    _engine(get_state(request)).resume()
    return {"is_paused": False}


@router.post("/reset_prefix_cache", responses=ERROR_RESPONSES)
async def reset_prefix_cache(request: Request, reset_running_requests: bool = False) -> dict:
    """Forget every cached prefix no running request holds; {"reset": false} when running requests still hold
    cached blocks (they stay cached), where vLLM's engine says False too. 503 while the server drains, as /pause."""
    state = get_state(request)
    engine = _engine(state)
    if reset_running_requests:
        message = "reset_running_requests=true (preempt running requests first) is not supported: leave it out"
        raise APIError(400, message, "reset_running_requests")
    if state.draining:
        raise APIError(503, "the server is shutting down", headers={"Retry-After": RETRY_AFTER_S})
    return {"reset": await engine.reset_prefix_cache(RESET_TIMEOUT_S)}


@router.get("/is_paused", responses=ERROR_RESPONSES)
async def is_paused(request: Request) -> dict:
    return {"is_paused": _engine(get_state(request)).is_paused}


def _engine(state: ServerState) -> AsyncEngine:
    state.check_generates()
    if state.dead:
        raise APIError(503, "the engine has failed", headers={"Retry-After": RETRY_AFTER_S})
    return state.running_engine()
