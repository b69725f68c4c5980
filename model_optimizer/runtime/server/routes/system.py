"""GET (and HEAD) /health and /ready; GET and POST /ping (vLLM's /health under SageMaker's name); GET /version,
/metrics, /v1/models and /v1/models/{model_id}."""

from __future__ import annotations

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse, PlainTextResponse, Response
from fastapi.routing import APIRoute
from starlette.exceptions import HTTPException
from starlette.types import Receive, Scope, Send

from model_optimizer.common.version import __version__
from model_optimizer.runtime.server.errors import error_response
from model_optimizer.runtime.server.protocol_outputs import (
    ErrorResponse,
    ModelCard,
    ModelList,
    ModelPermission,
    ReadyStatus,
)
from model_optimizer.runtime.server.routes import ERROR_RESPONSES
from model_optimizer.runtime.server.state import ServerState, get_state

router = APIRouter()


def allowing(*methods: str) -> type[APIRoute]:
    """A route class whose 405 names all of `methods` in its Allow header: a path served by several routes
    (HEAD on a route of its own, out of the schema) would otherwise name the first route's methods alone."""

    class AllowingRoute(APIRoute):
        async def handle(self, scope: Scope, receive: Receive, send: Send) -> None:
            if scope["method"] not in methods:
                raise HTTPException(status_code=405, headers={"Allow": ", ".join(methods)})
            await super().handle(scope, receive, send)

    return AllowingRoute


HEALTH_RESPONSES: dict = {
    200: {"description": "The engine is alive: an empty body."},
    503: {
        "model": ErrorResponse,
        "description": "The engine has failed (the server is exiting), or has not answered for longer than"
        " MOPT_ENGINE_HANG_TIMEOUT_S.",
    },
}


async def health(request: Request) -> Response:
    """200 while the engine loop lives (loading included); 503 once it has failed, and while its core leaves
    a ping unanswered past the hang timeout, so that a liveness probe restarts a server whose engine hangs."""
    state = get_state(request)
    if state.dead:
        return error_response(503, "the engine has failed")
    if state.hung_s:
        return error_response(503, state.hung_message())
    return Response(status_code=200)


async def ready(request: Request) -> Response:
    """200 once weights are loaded and warm-up is done, until shutdown starts; "unresponsive" while the
    engine core does not answer (it may come back: then 200 again)."""
    state = get_state(request)
    hung = state.hung_s > 0
    if state.dead or hung or state.draining or not state.ready:
        reason = "failed" if state.dead else "unresponsive" if hung else "draining" if state.draining else "loading"
        return JSONResponse({"status": reason}, status_code=503)
    return JSONResponse({"status": "ready"})


router.add_api_route(
    "/health",
    health,
    methods=["GET"],
    response_class=Response,
    responses=HEALTH_RESPONSES,
    route_class_override=allowing("GET", "HEAD"),
)
router.add_api_route(
    "/ready",
    ready,
    methods=["GET"],
    response_model=ReadyStatus,
    responses={
        200: {"description": 'Ready: {"status": "ready"}.'},
        503: {"model": ReadyStatus, "description": "Not ready: the status says loading, draining or failed."},
    },
    route_class_override=allowing("GET", "HEAD"),
)
for _path, _probe in (("/health", health), ("/ready", ready)):  # HEAD too: load balancers probe with it
    router.add_api_route(_path, _probe, methods=["HEAD"], include_in_schema=False)
for _method in ("GET", "POST"):  # vLLM's (SageMaker's) name for /health: the same answer, public as it is
    router.add_api_route(
        "/ping",
        health,
        methods=[_method],
        name=f"ping_{_method.lower()}",
        response_class=Response,
        responses=HEALTH_RESPONSES,
        route_class_override=allowing("GET", "POST"),
    )


@router.get("/version")
async def version() -> dict:
    return {"version": __version__}


@router.get(
    "/metrics",
    response_class=PlainTextResponse,
    responses={
        200: {
            "description": "Prometheus text exposition format 0.0.4.",
            "content": {"text/plain": {"schema": {"type": "string"}}},
        },
    },
)
async def metrics(request: Request) -> Response:
    return Response(get_state(request).metrics.render(), media_type="text/plain; version=0.0.4; charset=utf-8")


@router.get("/v1/models", response_model=ModelList, responses=ERROR_RESPONSES)
async def models(request: Request) -> ModelList:
    state = get_state(request)
    return ModelList(data=[_card(state, name) for name in state.model.names])


@router.get("/v1/models/{model_id:path}", response_model=ModelCard, responses=ERROR_RESPONSES)
async def model(model_id: str, request: Request) -> ModelCard:
    """The served model's card; 404 for any other id (a served name may hold slashes, hence :path)."""
    state = get_state(request)
    state.check_model(model_id)
    return _card(state, model_id)


def _card(state: ServerState, name: str) -> ModelCard:
    model = state.model
    return ModelCard(
        id=name, root=str(model.model_dir), max_model_len=model.max_model_len, permission=[ModelPermission()]
    )
