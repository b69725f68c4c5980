"""What EngineCore does with requests between steps (core.py's module docstring says what a step does): a
request's n completions made and queued, its params clamped where the sampler needs it; aborts of a whole
request or of one completion; and forgetting a request once its completions have all finished."""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

from model_optimizer.runtime.engine.messages import CoreRequest
from model_optimizer.runtime.engine.request import Request

if TYPE_CHECKING:
    from model_optimizer.runtime.engine.constrained import ConstrainedDecoding
    from model_optimizer.runtime.engine.input_processor import FitLimits
    from model_optimizer.runtime.engine.scheduler import Scheduler

LOGIT_BIAS_BOUND = 1e30
"""The most a logit_bias adds or takes away: the sampler adds it to float32 logits and divides by the
temperature (>= 1e-5), so a larger one (SamplingParams takes any finite value) could overflow into an
infinite logit and NaN probabilities. At this size it still outweighs every logit a model gives."""


class _Vocabulary(Protocol):
    """What the requests read of the core's ModelInfo (core.py imports this module)."""

    vocab_size: int
    eos_token_ids: frozenset[int]


class CoreRequests:
    """Mixed into EngineCore: its request groups, scheduler and grammars."""

    info: _Vocabulary
    limits: FitLimits
    scheduler: Scheduler
    num_clients: int
    groups: dict[str, list[Request]]
    client_of: dict[str, int]
    constrained: ConstrainedDecoding | None

    def add_request(self, request: CoreRequest) -> None:
        """Queue a request's n completions. ValueError when its id is in use or it could never fit."""
        params, n = request.params, request.params.n
        in_use = self._id_in_use(request.request_id, n)
        if in_use is not None:
            raise ValueError(f"request id {in_use!r} is already in use")
        self.limits.check(len(request.prompt_token_ids), request.max_tokens)
        if params.min_tokens:  # the sampler keeps these from being drawn until min_tokens have been
            stops = set(params.stop_token_ids) | (set() if params.ignore_eos else set(self.info.eos_token_ids))
            # a stop id outside the vocabulary is never drawn (and the sampler indexes the logits with these)
            barred = tuple(sorted(t for t in stops if t < self.info.vocab_size))
            params = params.clone(min_tokens_barred=barred)
        if params.logit_bias and any(abs(v) > LOGIT_BIAS_BOUND for v in params.logit_bias.values()):
            bound = LOGIT_BIAS_BOUND  # (any finite bias is taken, as vLLM's: one past float32 made NaN logits)
            params = params.clone(logit_bias={t: min(max(v, -bound), bound) for t, v in params.logit_bias.items()})
        children: list[Request] = []
        for index in range(n):
            child_params = params.for_completion(index)
            children.append(
                Request(
                    request_id=request.request_id if n == 1 else f"{index}:{request.request_id}",
                    prompt_token_ids=request.prompt_token_ids,
                    params=child_params,
                    eos_token_ids=self.info.eos_token_ids,
                    max_tokens=request.max_tokens,
                    priority=request.priority,
                    arrival_time=request.arrival_time,
                    parent_id=request.request_id,
                    index=index,
                    share_prompt_with=children[0] if index else None,
                )
            )
        if not 0 <= request.client < self.num_clients:
            raise ValueError(f"client {request.client} is not one of this core's {self.num_clients} frontends")
        if params.structured_outputs is not None:  # queued once its grammar has compiled (_admit_compiled)
            self._constrained().submit(request.request_id, params.structured_outputs, children)
        else:
            for child in children:
                self.scheduler.add_request(child)
        self.groups[request.request_id] = children
        self.client_of[request.request_id] = request.client

    def abort(self, request_ids: list[str]) -> None:
        """Finish requests (all their completions), or single completions named `index:request_id`, now;
        their blocks are free at once. No row goes out for them: only a frontend asks for an abort, and it
        has finished them on its side already (so a request id reused at once never gets the old one's
        news). Unknown or finished ids are ignored."""
        for request_id in request_ids:
            children = self.groups.get(request_id)
            if children is None:
                children = self._one_completion(request_id)
            for child in children:
                self.scheduler.abort(child.request_id)
            parent = children[0].parent_id if children else request_id
            if self.constrained is not None:  # still waiting for its grammar: in no queue yet
                self.constrained.abort(parent, children)  # type: ignore[arg-type]
            self._forget_if_done(parent)  # type: ignore[arg-type]

    def abort_all(self) -> None:
        self.abort(list(self.groups))

    def _id_in_use(self, request_id: str, n: int) -> str | None:
        """The id in use that a request of `n` completions would clash with, if any: its own id, or, where
        completions are named `index:request_id`, another request's name for one (a request `0:x` beside
        `x`'s two completions `0:x` and `1:x`, or `x` with two beside a live request `0:x`: an abort of
        `0:x` could not tell them apart)."""
        if request_id in self.groups:
            return request_id
        siblings = self.groups.get(request_id.partition(":")[2], ())
        if len(siblings) > 1 and any(c.request_id == request_id for c in siblings):
            return request_id
        named = (f"{index}:{request_id}" for index in range(n)) if n > 1 else ()
        return next((child for child in named if child in self.groups), None)

    def _one_completion(self, child_id: str) -> list[Request]:
        index, _, parent = child_id.partition(":")
        children = self.groups.get(parent)
        if children is None or not index.isdigit() or int(index) >= len(children):
            return []
        return [children[int(index)]]

    def _forget_if_done(self, request_id: str) -> None:
        """Forget a request whose completions have all finished; a completion that finished before its
        siblings (a stop string, an abort of `index:request_id`) gives its grammar matcher up at once, so
        that it neither counts as a live row of its constraint nor moves between lanes."""
        children = self.groups.get(request_id)
        if children is None:
            return
        compiling = self.constrained.compiling if self.constrained is not None else {}
        if all(c.finished for c in children) and request_id not in compiling:
            del self.groups[request_id]
            del self.client_of[request_id]
            if self.constrained is not None:
                self.constrained.drop(children)
        elif self.constrained is not None and len(children) > 1:
            self.constrained.drop([c for c in children if c.finished])

    # ----------------------------------------------------------------- stats
