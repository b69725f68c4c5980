"""ServerState: what every route needs, typed, and the server's life cycle flags: loading -> ready ->
draining, or dead once the engine loop has failed (and hung while its core leaves a ping unanswered).

Routes read the served model through `ServedModel` (name, folder, context length, vocabulary,
tokenizer), filled once at start-up, instead of reaching into the LLM and its engine: the
engine's internals can move without the routes noticing.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from contextvars import ContextVar
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from fastapi import Request

from model_optimizer.common.text import clip
from model_optimizer.runtime.config import EngineConfig
from model_optimizer.runtime.server.config import ServerConfig
from model_optimizer.runtime.server.errors import APIError
from model_optimizer.runtime.server.metrics import ServerMetrics
from model_optimizer.runtime.server.token_bound import TokenBound

if TYPE_CHECKING:  # the server imports these at start-up anyway; here only for the annotations
    from model_optimizer.runtime.core_process import CoreConnection, CoreHandle
    from model_optimizer.runtime.embed import Embedder
    from model_optimizer.runtime.engine.async_engine import AsyncEngine
    from model_optimizer.runtime.llm import LLM

RETRY_AFTER_S = "1"


@dataclass(frozen=True)
class ServedModel:
    """The facts about the served model that routes need, read once when the server is built."""

    name: str
    """The name clients send and /v1/models lists (first), and responses carry."""
    model_dir: Path
    max_model_len: int
    """Longest prompt plus output, in tokens (an embedding model's longest input)."""
    generates: bool
    """True for a generation model (completions, chat); False for an embedding model."""
    vocab_size: int = 0
    """Token ids must lie in [0, vocab_size) (an embedding model's: its tokenizer's length)."""
    tokenizer: Any = None
    """The Hugging Face tokenizer (an embedding model's: the embedder's); None for a model served without
    one (token-id prompts only)."""
    aliases: tuple[str, ...] = ()
    """Other names clients may send (--served-model-name a b); /v1/models lists them after `name`."""
    eos_token_ids: tuple[int, ...] = ()
    """The ids that end an output (generation_config's and the tokenizer's EOS, as the engine core has them)."""

    @property
    def names(self) -> tuple[str, ...]:
        return (self.name, *self.aliases)


@dataclass
class ServerState:
    config: ServerConfig
    engine_config: EngineConfig
    model: ServedModel
    llm: LLM | None = None
    """A generation model built in this process (tests, Python callers); its core runs in a thread."""
    embedder: Embedder | None = None
    """The Embedder (model_optimizer.runtime.embed) when the model is an embedding model; then llm is None."""
    core: CoreHandle | CoreConnection | None = None
    """The engine-core process serving the model (`mopt serve`); None when `llm` runs in this process."""
    frontend: int = 0
    """This process's number among the --api-server-count frontends of one core."""
    engine: AsyncEngine | None = None
    """The AsyncEngine driving llm.engine; None until the server starts, and for embedding models."""
    chat_template: str | None = None
    sampling_defaults: dict[str, Any] = field(default_factory=dict)
    """The model's generation_config.json sampling values, for fields a request leaves out."""
    token_bound: TokenBound | None = None
    """The fewest tokens a text can make; None: no early length check."""
    grammar_checker: Any = None
    """structured.ConstraintChecker, made at the first constraint (its sandbox process with it)."""
    ready: bool = False
    draining: bool = False
    load_error: BaseException | None = None
    num_admitted: int = 0
    """Engine requests admitted and not yet released (running, queued, or being cleaned up)."""
    num_accepted: int = 0
    """HTTP requests that passed check_accepting and whose response has not ended yet (InFlightMiddleware):
    what a drain waits for, from before their body is tokenized to their stream's last byte."""
    drain_expired: bool = False
    """The drain ran out of time and aborted what was left: a request still on its way to the engine is
    refused (503) instead of starting."""
    fatal_hooks: list[Callable[[BaseException], None]] = field(default_factory=list)
    """Called on the event loop when the engine dies (the launcher stops uvicorn and exits non-zero)."""
    executor: ThreadPoolExecutor = field(
        default_factory=lambda: ThreadPoolExecutor(2, thread_name_prefix="mopt-tokenize")
    )
    metrics: ServerMetrics = field(init=False)
    """Prometheus metrics; the engine gauges read the engine's latest stats snapshot."""

    def __post_init__(self) -> None:
        self.metrics = ServerMetrics(
            self.model.name,
            lambda: self.engine.stats if self.engine is not None else None,
            speculative=self.engine_config.speculative,
            max_model_len=self.model.max_model_len,
        )

    # ----------------------------------------------------------------- life cycle
    @property
    def dead(self) -> bool:
        return self.load_error is not None or (self.engine is not None and self.engine.dead)

    @property
    def hung_s(self) -> float:
        """Seconds the engine core has left a ping unanswered, once past MOPT_ENGINE_HANG_TIMEOUT_S
        (engine/hang_watch.py); 0.0 while it answers. Not dead: running requests wait for it, and it serves
        on once it answers; meanwhile /health and /ready say 503 and new requests are refused."""
        return self.engine.client.hung_s() if self.engine is not None else 0.0

    def hung_message(self) -> str:
        """What /health and a refused request say while the core does not answer."""
        return f"the engine has not answered for {self.hung_s:.0f} s; retry later"

    def check_accepting(self) -> None:
        """Raise 503 (with Retry-After) unless new requests can be served now."""
        if self.dead:
            raise APIError(
                503, "the engine has failed; the server is shutting down", headers={"Retry-After": RETRY_AFTER_S}
            )
        if self.draining:
            raise APIError(503, "the server is shutting down", headers={"Retry-After": RETRY_AFTER_S})
        if self.hung_s:
            raise APIError(503, self.hung_message(), headers={"Retry-After": RETRY_AFTER_S})
        if not self.ready:
            raise APIError(503, "the model is still loading", headers={"Retry-After": RETRY_AFTER_S})
        slot = IN_FLIGHT.get()
        if slot is not None and not slot.counted:  # a drain that starts from now on waits for this request
            slot.counted = True
            self.num_accepted += 1

    def check_generates(self) -> None:
        """400 on generation routes when the served model is an embedding model."""
        if not self.model.generates:
            raise APIError(400, f"the model `{self.model.name}` is an embedding model: use /v1/embeddings", "model")

    def check_model(self, name: str | None) -> None:
        if name is not None and name not in self.model.names:
            raise APIError(
                404, f"The model `{clip(name, 100)}` does not exist; this server serves `{self.model.name}`.", "model"
            )

    def running_engine(self) -> AsyncEngine:
        """The engine, for a route that has passed check_accepting and check_generates."""
        if self.engine is None:
            raise APIError(503, "the engine is not running", headers={"Retry-After": RETRY_AFTER_S})
        return self.engine

    # ----------------------------------------------------------------- admission
    def admit(self, num_requests: int) -> Admission:
        """Reserve room for engine requests, or refuse with 503 when the queue is full; 400 for more than
        the server ever holds at once (retrying could never succeed); 503 once a drain has run out of time."""
        if self.drain_expired:
            raise APIError(
                503, "the server shut down before the request started", headers={"Retry-After": RETRY_AFTER_S}
            )
        limit = self.engine_config.max_num_seqs + self.config.max_queued_requests
        if num_requests > limit:
            raise APIError(
                400,
                f"this request needs {num_requests} engine requests (one per prompt, n per beam-search prompt), more than the {limit} this "
                "server holds running or queued (--max-num-seqs plus --max-queued-requests); send fewer prompts",
                "prompt",
            )
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
    """Room held for a request group; release() gives it back once, however often it is called."""

    def __init__(self, state: ServerState, num_requests: int) -> None:
        self.state = state
        self.num_requests = num_requests

    def release(self) -> None:
        self.state.num_admitted -= self.num_requests
        self.num_requests = 0


class InFlight:
    """One HTTP request's mark: `counted` once it passed check_accepting (ServerState.num_accepted)."""

    __slots__ = ("counted",)

    def __init__(self) -> None:
        self.counted = False


IN_FLIGHT: ContextVar[InFlight | None] = ContextVar("mopt_in_flight", default=None)
"""The request being served in this task (and the tasks it starts), set by InFlightMiddleware."""


class InFlightMiddleware:
    """Counts a request in ServerState.num_accepted from its check_accepting() until its response has ended
    (a stream's last chunk sent, or the client gone), so that a drain waits for requests still being
    parsed, tokenized or compiled, not only those the engine holds."""

    def __init__(self, app: Any, state: ServerState) -> None:
        self.app = app
        self.state = state

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        slot = InFlight()
        token = IN_FLIGHT.set(slot)
        try:
            await self.app(scope, receive, send)
        finally:
            IN_FLIGHT.reset(token)
            if slot.counted:
                self.state.num_accepted -= 1


def get_state(request: Request) -> ServerState:
    return request.app.state.server
