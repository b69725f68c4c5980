"""create_app(config): the FastAPI application of `mopt serve`.

The model is loaded (and warmed up) before the app exists: `mopt serve` binds its port only once
the model can answer, so /health never says healthy about a model that is not there, and a
configuration error (unsupported architecture, KV cache too small, a chat template that does not
render) is a clear message and exit code 2 before anything listens.

A generation model runs in an engine-core process of its own (core_process.py): this process, the
frontend, keeps HTTP, tokenizing, detokenizing and streaming, and never imports torch. Pass `llm=`
to serve a model already built in this process instead (its core then runs in a thread: tests hold
its step gate), or `core=` for a core process started elsewhere. An embedding model (a
sentence-transformers folder with modules.json, or an encoder such as BERT) is served by an Embedder
in this process, on /v1/embeddings only.
"""

from __future__ import annotations

import asyncio
import logging
import os
import sys
import time
from contextlib import asynccontextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

from fastapi import FastAPI

from model_optimizer.common.processes import freeze_startup_objects, unfreeze_objects
from model_optimizer.common.version import __version__
from model_optimizer.runtime.config import EngineConfig
from model_optimizer.runtime.engine.async_engine import AsyncEngine
from model_optimizer.runtime.engine.input_processor import chat_template_for, chat_text
from model_optimizer.runtime.llm_embed import warn_unused_embedding_settings
from model_optimizer.runtime.models.chat_templates import load_template
from model_optimizer.runtime.server.config import ServerConfig
from model_optimizer.runtime.server.cors import JSONCORSMiddleware
from model_optimizer.runtime.server.errors import install_error_handlers
from model_optimizer.runtime.server.guard import GuardMiddleware
from model_optimizer.runtime.server.http_metrics import HTTPMetricsMiddleware
from model_optimizer.runtime.server.request_ids import RequestIdMiddleware
from model_optimizer.runtime.server.routes import (
    chat,
    completions,
    embeddings,
    pause,
    responses,
    score,
    system,
    tokenize,
)
from model_optimizer.runtime.server.state import InFlightMiddleware, ServedModel, ServerState
from model_optimizer.runtime.server.stats_log import start_stats_logging
from model_optimizer.runtime.server.token_bound import token_bound

if TYPE_CHECKING:
    from model_optimizer.runtime.core_process import CoreConnection, CoreHandle, CoreStart
    from model_optimizer.runtime.llm import LLM

logger = logging.getLogger(__name__)


def create_app(
    config: ServerConfig,
    engine_config: EngineConfig | None = None,
    llm: LLM | None = None,
    embedder: Any = None,
    core: CoreHandle | CoreConnection | None = None,
    frontend: int = 0,
    core_start: CoreStart | None = None,
) -> FastAPI:
    """The app for `config`: loads the model unless `llm`, `embedder` or `core` is given. `frontend` is
    this process's number among `--api-server-count` frontends of one core (0: the one that started it).
    `core_start`: the engine core, already spawned for this config (`mopt serve` starts it before it
    imports the HTTP side), taken once the checks here pass; stopped if they fail."""
    try:
        return _create_app(config, engine_config, llm, embedder, core, frontend, core_start)
    finally:
        if core_start is not None:
            core_start.abandon()  # nothing, once the app took it


def _create_app(
    config: ServerConfig,
    engine_config: EngineConfig | None,
    llm: LLM | None,
    embedder: Any,
    core: CoreHandle | CoreConnection | None,
    frontend: int,
    core_start: CoreStart | None,
) -> FastAPI:
    quiet_transformers()
    engine_config = engine_config or (llm.config if llm is not None else EngineConfig())
    chat_template = load_template(config.chat_template) if config.chat_template else None  # a typo fails at once
    from model_optimizer.runtime.generation_defaults import config_generation_defaults
    from model_optimizer.runtime.hub import resolve_model_dir

    model_dir = (
        Path(llm.model_dir) if llm is not None else resolve_model_dir(engine_config.model, engine_config.revision)
    )
    generates = llm is not None or core is not None or (embedder is None and not is_embedding_model(model_dir))
    tokenizer = _frontend_tokenizer(engine_config, llm, model_dir) if generates else None
    if chat_template:
        check_template(chat_template, config.chat_template, tokenizer, config.chat_template_content_format)
    elif getattr(tokenizer, "chat_template", None):  # named templates without a `default`: every chat would fail
        chat_template_for(tokenizer)
    sampling_defaults = (  # ValueError for a broken file: exit 2
        config_generation_defaults(engine_config, model_dir) if generates else {}
    )
    if generates and llm is None and core is None:  # every check that needs no model is done: load it
        core = start_engine_core(engine_config, model_dir, config.api_server_count, core_start)
    elif not generates and embedder is None:
        embedder = load_embedder(engine_config, model_dir)
    try:
        model = served_model(
            config.model_names or (model_dir.resolve().name or str(engine_config.model),),
            llm,
            embedder,
            core,
            tokenizer,
            model_dir,
        )
    except BaseException:
        if core is not None:
            core.stop()
        raise
    state = ServerState(
        config=config,
        engine_config=engine_config,
        model=model,
        llm=llm,
        embedder=embedder,
        core=core,
        chat_template=chat_template,
        sampling_defaults=sampling_defaults,
        frontend=frontend,
    )
    if tokenizer is not None:
        state.token_bound = token_bound(tokenizer)

    @asynccontextmanager
    async def lifespan(_: FastAPI):
        loop = asyncio.get_running_loop()
        if state.model.generates:
            _engine_ready(state, loop)
        else:
            _embedder_ready(state)
        stats_task = start_stats_logging(state, config.log_interval if frontend == 0 else 0)  # one line, not N
        freeze_startup_objects()
        yield
        unfreeze_objects()
        if stats_task is not None:
            stats_task.cancel()
        if state.engine is not None:
            state.engine.stop()
        elif state.core is not None:  # never started (the app was built, never served)
            state.core.stop()
        state.executor.shutdown(wait=False, cancel_futures=True)
        if state.grammar_checker is not None:
            state.grammar_checker.close()

    hidden = {"docs_url": None, "redoc_url": None, "openapi_url": None} if config.disable_fastapi_docs else {}
    app = FastAPI(title="Model-Optimizer OpenAI-compatible server", version=__version__, lifespan=lifespan, **hidden)
    app.state.server = state
    install_error_handlers(app)
    for module in (system, completions, chat, responses, embeddings, score, tokenize):
        app.include_router(module.router)
    if config.enable_pause:
        app.include_router(pause.router)
    app.add_middleware(InFlightMiddleware, state=state)  # what a drain waits for (state.num_accepted)
    app.add_middleware(GuardMiddleware, state=state)
    if config.allowed_origins:  # outside the guard: preflights are answered before the API-key check
        app.add_middleware(
            JSONCORSMiddleware,
            allow_origins=config.allowed_origins,
            allow_methods=config.allowed_methods or ["*"],
            allow_headers=config.allowed_headers or ["*"],  # any by default: SDKs add their own (x-stainless-*)
            allow_credentials=config.allow_credentials,
            max_age=600,
        )
    app.add_middleware(HTTPMetricsMiddleware, metrics=state.metrics)  # counts the guard's refusals
    if config.enable_request_id_headers:  # around Starlette's whole stack, its 500 handler included
        build = app.build_middleware_stack
        app.build_middleware_stack = lambda: RequestIdMiddleware(build())  # type: ignore[method-assign]
    if config.root_path:  # as vLLM sets it: FastAPI names it in its links and routes with or without it
        app.root_path = config.root_path
    return app


def quiet_transformers() -> None:
    """Errors only from transformers: its warnings (a text longer than the tokenizer's model_max_length,
    which the server refuses itself with a 400) would reach stderr outside our log format. Not imported
    for this: a model with a tokenizer.json never needs it, and the import costs seconds of start-up."""
    if "transformers" not in sys.modules:
        os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")  # read by transformers when it is imported
        return
    import transformers

    transformers.logging.set_verbosity_error()


def _frontend_tokenizer(engine_config: EngineConfig, llm: Any, model_dir: Path) -> Any:
    """The tokenizer this process tokenizes and detokenizes with (None: token-id prompts only)."""
    if llm is not None:
        return llm.tokenizer
    from model_optimizer.runtime.startup import engine_tokenizer

    return engine_tokenizer(engine_config, model_dir)


def load_embedder(config: EngineConfig, model_dir: Path) -> Any:
    """The Embedder for an embedding model folder, loaded and warmed up; logs what and how long."""
    from model_optimizer.runtime.embed import EmbedConfig, Embedder
    from model_optimizer.runtime.embed.config import refuse_load_time_quantization

    start = time.perf_counter()
    refuse_load_time_quantization(config.quantization, model_dir)
    warn_unused_embedding_settings(config, logger)
    # --max-model-len is the longest input here, as the context is for generation (checked against the positions)
    embedder = Embedder(model_dir, **vars(EmbedConfig.from_engine(config, max_seq_length=config.max_model_len)))
    embedder.embed(["warm-up"])
    _log_loaded(model_dir, embedder.backbone.model, time.perf_counter() - start, config.load_format == "dummy")
    return embedder


def start_engine_core(
    config: EngineConfig, model_dir: Path, num_frontends: int = 1, spawned: CoreStart | None = None
) -> CoreHandle:
    """The engine-core process for a generation model (`spawned` when it was started earlier), loaded
    and warmed up; logs what and how long."""
    from model_optimizer.runtime.core_process import spawn_core

    start = time.perf_counter()
    core = (spawned or spawn_core(config, num_frontends)).ready()
    where = f"on {config.tensor_parallel_size} tensor-parallel workers " if config.tensor_parallel_size > 1 else ""
    logger.info(
        "loaded model %s %sin the engine-core process (pid %d): %s%s, in %.1f s",
        model_dir.resolve(),
        where,
        core.pid,
        core.extra.get("weights", "?"),
        DUMMY_NOTE if config.load_format == "dummy" else "",
        time.perf_counter() - start,
    )
    return core


DUMMY_NOTE = " (random weights: --load-format dummy, for measuring speed; the text means nothing)"


def _log_loaded(model_dir: Path, model: Any, seconds: float, dummy: bool = False) -> None:
    from model_optimizer.runtime.layers.quantization.summary import summarize_weights

    weights = summarize_weights(model).describe() + (DUMMY_NOTE if dummy else "")
    logger.info("loaded model %s: %s, in %.1f s", model_dir.resolve(), weights, seconds)


SAMPLE_CONVERSATION = [{"role": "user", "content": "Hello"}]
"""One user turn: every template must take it (some refuse a system turn, or turns out of order)."""


def check_template(template: str, path: str | None, tokenizer: Any, content_format: str = "auto") -> None:
    """Render the chat template once on a sample conversation (its content shaped as `content_format`
    says), so a broken one, or one that cannot take that shape, stops the start-up."""
    if tokenizer is not None:
        try:
            chat_text(tokenizer, SAMPLE_CONVERSATION, template, content_format=content_format)
        except ValueError as exc:
            raise ValueError(f"chat template {path} does not render a sample conversation: {exc}") from None
        return
    from model_optimizer.runtime.models.chat_render import render_chat

    try:  # token-id serving without a tokenizer: the template alone, with no special tokens to fill in
        text = render_chat(template, SAMPLE_CONVERSATION, {}, add_generation_prompt=True)
    except Exception as exc:  # noqa: BLE001 - any failure of the template is the template's fault
        raise ValueError(
            f"chat template {path} does not render a sample conversation: {type(exc).__name__}: {exc}"
        ) from None
    if not text.strip():
        raise ValueError(f"chat template {path} renders a sample conversation as empty text")


def is_embedding_model(model_dir: Path) -> bool:
    """A sentence-transformers folder (modules.json), an encoder architecture such as BERT, or a decoder saved
    without its LM head (model_config.is_embedding_folder)."""
    from model_optimizer.runtime.models.model_config import is_embedding_folder

    return (model_dir / "modules.json").is_file() or is_embedding_folder(model_dir)


def served_model(
    names: tuple[str, ...],
    llm: LLM | None,
    embedder: Any,
    core: CoreHandle | CoreConnection | None,
    tokenizer: Any,
    model_dir: Path,
) -> ServedModel:
    """What routes need to know about the model, read once (no chains into the engine at request time);
    `names`: the served names, the first the one responses carry."""
    name, aliases = names[0], names[1:]
    if llm is not None or core is not None:
        info = llm.engine.info if llm is not None else core.info  # type: ignore[union-attr]
        return ServedModel(
            name=name,
            aliases=aliases,
            model_dir=model_dir,
            max_model_len=info.max_model_len,
            generates=True,
            vocab_size=info.vocab_size,
            tokenizer=tokenizer,
            eos_token_ids=tuple(sorted(info.eos_token_ids)),
        )
    return ServedModel(  # the embedder's tokenizer: /tokenize counts what an input costs, as vLLM's does
        name=name,
        aliases=aliases,
        model_dir=Path(embedder.model_dir),
        max_model_len=embedder.max_seq_length,
        generates=False,
        vocab_size=len(embedder.tokenizer),
        tokenizer=embedder.tokenizer,
    )


def _embedder_ready(state: ServerState) -> None:
    state.ready = True
    logger.info("serving embeddings of %s", state.model.name)


def _engine_ready(state: ServerState, loop: asyncio.AbstractEventLoop) -> None:
    from model_optimizer.runtime.engine.core import fit_limits
    from model_optimizer.runtime.engine.core_client import ProcessClient

    on_fatal = lambda exc: _fatal(state, exc)  # noqa: E731
    interval = state.config.stream_interval
    if state.llm is not None:  # a model built in this process: its core runs in a thread
        state.engine = AsyncEngine.in_process(state.llm.engine, on_fatal, interval)
    else:
        info = state.core.info  # type: ignore[union-attr]
        limits = fit_limits(state.engine_config, info)
        client = ProcessClient(state.core, state.frontend)
        state.engine = AsyncEngine(
            client, state.model.tokenizer, info.vocab_size, limits, on_fatal, state.frontend, interval
        )
    state.engine.start(loop)
    watch = getattr(state.llm.runner, "on_worker_death", None) if state.llm is not None else None
    if watch is not None:  # tensor parallel: a worker that dies while the engine idles fails it at once
        watch(state.engine.fail)
    state.ready = True
    logger.info("serving %s (max_model_len %d)", state.model.name, state.model.max_model_len)
    bound = state.token_bound
    if bound is not None:
        worse = (
            f" ({bound.max_chars_per_token} in text not in {bound.normal_form})" if bound.normalizer_factor > 1 else ""
        )
        logger.info(
            "text prompts that cannot fit are refused before tokenizing: a token stands for at most %d characters%s",
            bound.longest_token,
            worse,
        )


def _fatal(state: ServerState, exc: BaseException) -> None:
    if state.engine is None:
        state.load_error = exc
    for hook in state.fatal_hooks:
        hook(exc)
