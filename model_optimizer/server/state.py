"""ServerState: what every route needs (engine, tokenizer, config, metrics) and the server's
life cycle flags: loading -> ready -> draining, or dead once the engine loop has failed."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from fastapi import Request

from model_optimizer.config import EngineConfig
from model_optimizer.server.config import ServerConfig
from model_optimizer.server.errors import APIError, clip

RETRY_AFTER_S = "1"


@dataclass
class ServerState:
    config: ServerConfig
    engine_config: EngineConfig
    llm: Any = None
    """The loaded LLM (tokenizer, engine, model_dir); None while loading."""
    engine: Any = None
    """The AsyncEngine driving llm.engine; None while loading."""
    metrics: Any = None
    model_name: str = ""
    chat_template: str | None = None
    sampling_defaults: dict[str, Any] = field(default_factory=dict)
    """The model's generation_config.json sampling values, for fields a request leaves out."""
    token_bound: Any = None
    """The fewest tokens a text can make (server.limits.TokenBound); None: no early length check."""
    embedder: Any = None
    """The Embedder (model_optimizer.embed) when the model is an embedding model; then llm is None."""
    ready: bool = False
    draining: bool = False
    load_error: BaseException | None = None
    num_admitted: int = 0
    fatal_hooks: list[Callable[[BaseException], None]] = field(default_factory=list)
    """Called on the event loop when the engine dies (the launcher stops uvicorn and exits non-zero)."""
    executor: ThreadPoolExecutor = field(
        default_factory=lambda: ThreadPoolExecutor(2, thread_name_prefix="mopt-tokenize")
    )

    # ----------------------------------------------------------------- life cycle
    @property
    def dead(self) -> bool:
        return self.load_error is not None or (self.engine is not None and self.engine.dead)

    @property
    def tokenizer(self) -> Any:
        """The model's tokenizer; None for a model served without one (token-id prompts only)."""
        return self.llm.tokenizer

    @property
    def max_model_len(self) -> int:
        return self.llm.engine.info.max_model_len

    def check_accepting(self) -> None:
        """Raise 503 (with Retry-After) unless new requests can be served now."""
        if self.dead:
            raise APIError(
                503, "the engine has failed; the server is shutting down", headers={"Retry-After": RETRY_AFTER_S}
            )
        if self.draining:
            raise APIError(503, "the server is shutting down", headers={"Retry-After": RETRY_AFTER_S})
        if not self.ready:
            raise APIError(503, "the model is still loading", headers={"Retry-After": RETRY_AFTER_S})

    def check_generates(self) -> None:
        """400 on generation routes when the served model is an embedding model."""
        if self.llm is None:
            raise APIError(400, f"the model `{self.model_name}` is an embedding model: use /v1/embeddings", "model")

    def check_model(self, name: str | None) -> None:
        if name is not None and name != self.model_name:
            raise APIError(
                404, f"The model `{clip(name, 100)}` does not exist; this server serves `{self.model_name}`.", "model"
            )

    # ----------------------------------------------------------------- admission
    def admit(self, num_requests: int) -> Admission:
        """Reserve room for engine requests, or refuse with 503 when the queue is full."""
        limit = self.engine_config.max_num_seqs + self.config.max_queued_requests
        if self.num_admitted + num_requests > limit:
            raise APIError(
                503,
                f"the server is at capacity ({limit} requests running or queued); retry later",
                headers={"Retry-After": RETRY_AFTER_S},
            )
        self.num_admitted += num_requests
        return Admission(self, num_requests)

    async def run_blocking(self, fn: Callable, *args: Any) -> Any:
        """Run CPU work (tokenizing, templating) off the event loop."""
        return await asyncio.get_running_loop().run_in_executor(self.executor, fn, *args)


class Admission:
    """Room held for a request group; release() is idempotent."""

    def __init__(self, state: ServerState, num_requests: int) -> None:
        self.state = state
        self.num_requests = num_requests

    def release(self) -> None:
        self.state.num_admitted -= self.num_requests
        self.num_requests = 0


def get_state(request: Request) -> ServerState:
    return request.app.state.server
