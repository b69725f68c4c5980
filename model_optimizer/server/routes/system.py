"""GET /health, /ready, /version, /metrics and /v1/models."""

from __future__ import annotations

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse, Response

from model_optimizer import __version__
from model_optimizer.server.errors import error_response
from model_optimizer.server.protocol import ModelCard, ModelList
from model_optimizer.server.routes import ERROR_RESPONSES
from model_optimizer.server.state import get_state

router = APIRouter()


@router.get("/health")
async def health(request: Request) -> Response:
    """200 while the engine loop lives (loading included), 503 once it has failed."""
    state = get_state(request)
    if state.dead:
        return error_response(503, "the engine has failed")
    return Response(status_code=200)


@router.get("/ready")
async def ready(request: Request) -> Response:
    """200 once weights are loaded and warm-up is done, until shutdown starts."""
    state = get_state(request)
    if state.dead or state.draining or not state.ready:
        reason = "failed" if state.dead else "draining" if state.draining else "loading"
        return JSONResponse({"status": reason}, status_code=503)
    return JSONResponse({"status": "ready"})


@router.get("/version")
async def version() -> dict:
    return {"version": __version__}


@router.get("/metrics")
async def metrics(request: Request) -> Response:
    return Response(get_state(request).metrics.render(), media_type="text/plain; version=0.0.4; charset=utf-8")


@router.get("/v1/models", response_model=ModelList, responses=ERROR_RESPONSES)
async def models(request: Request) -> ModelList:
    state = get_state(request)
    root, max_len = None, None
    if state.llm is not None:
        root, max_len = str(state.llm.model_dir), state.max_model_len
    elif state.embedder is not None:
        root, max_len = str(state.embedder.model_dir), state.embedder.max_seq_length
    return ModelList(data=[ModelCard(id=state.model_name, root=root, max_model_len=max_len)])
