"""create_app(config): the FastAPI application of `mopt serve`.

The model loads in a background thread once the app starts, so the server answers /health
(200) and /ready (503, "loading") at once; /ready turns 200 after loading and a warm-up
generation. Pass `llm=` (or `embedder=`) to serve a model that is already built (tests,
embedding the server in Python). An embedding model (a sentence-transformers folder with
modules.json, or an encoder such as BERT) is served by an Embedder on /v1/embeddings only.
"""

from __future__ import annotations

import asyncio
import logging
import threading
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

from fastapi import FastAPI

from model_optimizer import __version__
from model_optimizer.config import EngineConfig
from model_optimizer.engine.async_engine import AsyncEngine
from model_optimizer.sampling_params import SamplingParams
from model_optimizer.server.config import ServerConfig
from model_optimizer.server.errors import install_error_handlers
from model_optimizer.server.metrics import HTTPMetricsMiddleware, ServerMetrics
from model_optimizer.server.middleware import GuardMiddleware
from model_optimizer.server.routes import chat, completions, embeddings, system
from model_optimizer.server.state import ServerState

logger = logging.getLogger(__name__)


def create_app(config: ServerConfig, engine_config: EngineConfig | None = None, llm: Any = None,
               embedder: Any = None) -> FastAPI:
    engine_config = engine_config or (llm.config if llm is not None else EngineConfig())
    state = ServerState(config=config, engine_config=engine_config)
    if config.chat_template:
        state.chat_template = _read_template(config.chat_template)
    state.model_name = config.served_model_name or _default_name(engine_config, llm or embedder)
    state.metrics = ServerMetrics(state.model_name, lambda: state.engine.stats if state.engine else None)

    @asynccontextmanager
    async def lifespan(_: FastAPI):
        loop = asyncio.get_running_loop()
        if llm is not None:
            _engine_ready(state, llm, loop)
        elif embedder is not None:
            _embedder_ready(state, embedder)
        else:
            threading.Thread(target=_load, args=(state, loop), name="mopt-load", daemon=True).start()
        yield
        if state.engine is not None:
            state.engine.stop()
        state.executor.shutdown(wait=False, cancel_futures=True)

    app = FastAPI(title="Model-Optimizer OpenAI-compatible server", version=__version__, lifespan=lifespan)
    app.state.server = state
    install_error_handlers(app)
    for module in (system, completions, chat, embeddings):
        app.include_router(module.router)
    app.add_middleware(GuardMiddleware, state=state)
    app.add_middleware(HTTPMetricsMiddleware, metrics=state.metrics)  # outermost: counts the guard's refusals
    return app


def _default_name(engine_config: EngineConfig, model: Any) -> str:
    """The model folder's name (the built-in default's when no --model was given)."""
    from model_optimizer.llm import resolve_model_dir

    if model is not None:
        return Path(model.model_dir).resolve().name
    return resolve_model_dir(engine_config.model).resolve().name or str(engine_config.model)


def _read_template(path: str) -> str:
    file = Path(path).expanduser()
    if not file.is_file():
        raise FileNotFoundError(f"chat template file {file} does not exist")
    return file.read_text()


def _load(state: ServerState, loop: asyncio.AbstractEventLoop) -> None:
    """Build the model and warm it up (loading thread), then start serving (event loop)."""
    from model_optimizer.llm import LLM, resolve_model_dir

    config = state.engine_config
    try:
        model_dir = resolve_model_dir(config.model)
        if is_embedding_model(model_dir):
            from model_optimizer.embed import Embedder

            embedder = Embedder(model_dir, tokenizer=config.tokenizer, dtype=config.dtype, device=config.device,
                                load_format=config.load_format)
            embedder.embed(["warm-up"])
            loop.call_soon_threadsafe(_embedder_ready, state, embedder)
            return
        fields = {k: v for k, v in vars(config).items() if k != "model"}
        llm = LLM(config.model, **fields)
        llm.generate([[1, 2, 3]], SamplingParams(max_tokens=2, temperature=0.0))  # warm-up
    except BaseException as exc:  # noqa: BLE001 - reported, then the server exits non-zero
        logger.exception("loading the model failed")
        loop.call_soon_threadsafe(_fatal, state, exc)
        return
    loop.call_soon_threadsafe(_engine_ready, state, llm, loop)


def is_embedding_model(model_dir: Path) -> bool:
    """A sentence-transformers folder (modules.json) or an encoder architecture such as BERT."""
    from model_optimizer.models.bert import ENCODER_ARCHITECTURES
    from model_optimizer.models.model_config import read_config

    if (model_dir / "modules.json").is_file():
        return True
    architecture = (read_config(model_dir).get("architectures") or [""])[0]
    return architecture in ENCODER_ARCHITECTURES


def _embedder_ready(state: ServerState, embedder: Any) -> None:
    state.embedder = embedder
    state.ready = True
    logger.info("serving embeddings of %s", state.model_name)


def _engine_ready(state: ServerState, llm: Any, loop: asyncio.AbstractEventLoop) -> None:
    state.llm = llm
    state.engine = AsyncEngine(llm.engine, on_fatal=lambda exc: _fatal(state, exc))
    state.engine.start(loop)
    state.ready = True
    logger.info("serving %s (max_model_len %d)", state.model_name, llm.engine.info.max_model_len)


def _fatal(state: ServerState, exc: BaseException) -> None:
    if state.engine is None:
        state.load_error = exc
    for hook in state.fatal_hooks:
        hook(exc)
