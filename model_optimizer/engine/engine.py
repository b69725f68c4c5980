"""LLMEngine: add requests, step, abort. One step is schedule -> execute -> update.

Pure Python: the model runner is passed in, so the engine runs with any object that can
`launch(SchedulerOutput)` a step and `collect` its sampled tokens. With asynchronous scheduling
(the default) each `step()` launches the next batch before it waits for the previous one, so
the host schedules, prepares inputs and detokenizes while the device computes; outputs then
trail the launches by one step.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any, Protocol

from model_optimizer.config import EngineConfig
from model_optimizer.engine.io import IncrementalDetokenizer, encode_prompt
from model_optimizer.engine.kv_cache import KVCacheManager, check_kv_capacity
from model_optimizer.engine.outputs import CompletionOutput, RequestMetrics, RequestOutput
from model_optimizer.engine.request import Logprob, Request, RequestStatus
from model_optimizer.engine.scheduler import Scheduler, SchedulerConfig, SchedulerOutput
from model_optimizer.sampling_params import SamplingParams


class ModelRunner(Protocol):
    def launch(self, scheduler_output: SchedulerOutput) -> Any:
        """Start computing a step; return a handle to collect it with."""

    def collect(self, handle: Any) -> dict[str, tuple[int, Logprob | None]]:
        """Wait for a launched step: request id -> (sampled token id, logprob or None)."""


@dataclass
class ModelInfo:
    """What the engine needs to know of the model, without touching torch."""

    vocab_size: int
    max_model_len: int
    eos_token_ids: frozenset[int]
    num_kv_blocks: int


@dataclass
class EngineStats:
    num_running: int
    num_waiting: int
    num_free_blocks: int
    num_blocks: int
    kv_cache_usage: float
    num_preemptions: int
    prefix_cache_queries: int
    prefix_cache_hits: int
    num_prompt_tokens: int
    num_generation_tokens: int
    num_steps: int

    @property
    def prefix_cache_hit_rate(self) -> float:
        return self.prefix_cache_hits / self.prefix_cache_queries if self.prefix_cache_queries else 0.0


@dataclass
class _Parent:
    """A user request and its n completions."""

    prompt: str | None
    prompt_token_ids: list[int]
    children: list[Request]
    detokenizers: list[IncrementalDetokenizer | None]
    """Incremental text per completion, kept only for streaming or stop strings."""
    final_texts: dict[int, str] = field(default_factory=dict)
    """Text of finished completions decoded in one go at the end."""
    final_only: bool = False
    """Report this request only once it has finished (offline generation)."""


class LLMEngine:
    def __init__(self, config: EngineConfig, runner: ModelRunner, tokenizer: Any, info: ModelInfo) -> None:
        self.config = config
        self.runner = runner
        self.tokenizer = tokenizer
        self.info = info
        check_kv_capacity(info.num_kv_blocks, config.block_size, info.max_model_len)
        self.kv_cache = KVCacheManager(info.num_kv_blocks, config.block_size, config.enable_prefix_caching)
        self.scheduler = Scheduler(
            SchedulerConfig(
                max_num_seqs=config.max_num_seqs,
                max_num_batched_tokens=config.max_num_batched_tokens,
                max_model_len=info.max_model_len,
                enable_chunked_prefill=config.enable_chunked_prefill,
                policy=config.scheduling_policy,
                max_num_partial_prefills=config.max_num_partial_prefills,
                long_prefill_token_threshold=config.long_prefill_token_threshold,
            ),
            self.kv_cache,
        )
        self.parents: dict[str, _Parent] = {}
        self.num_prompt_tokens = 0
        self.num_generation_tokens = 0
        self.num_steps = 0
        self._in_flight: tuple[SchedulerOutput, Any] | None = None
        """The launched step whose tokens have not been collected yet (asynchronous scheduling)."""

    # ----------------------------------------------------------------- requests
    def add_request(
        self,
        request_id: str,
        prompt: str | list[int],
        params: SamplingParams | None = None,
        priority: int = 0,
        arrival_time: float | None = None,
        stream: bool = False,
        final_only: bool = False,
    ) -> None:
        """Queue a request. Raises ValueError when it is malformed or could never fit.

        With `stream`, text is decoded as tokens arrive; otherwise (and without stop strings)
        it is decoded once when the completion finishes, which keeps the step loop lean. With
        `final_only`, `step()` reports the request only when it finishes, sparing a copy of its
        tokens every step.
        """
        if request_id in self.parents:
            raise ValueError(f"request id {request_id!r} is already in use")
        params = params or SamplingParams()
        prompt_token_ids = encode_prompt(self.tokenizer, prompt, self.info.vocab_size)
        room = self.info.max_model_len - len(prompt_token_ids)
        max_tokens = room if params.max_tokens is None else min(params.max_tokens, room)
        self.scheduler.check_fits(len(prompt_token_ids), max(max_tokens, 1))
        children = []
        for index in range(params.n):
            child_params = params if params.seed is None or index == 0 else params.clone(seed=params.seed + index)
            children.append(
                Request(
                    request_id=request_id if params.n == 1 else f"{index}:{request_id}",
                    prompt_token_ids=prompt_token_ids,
                    params=child_params,
                    eos_token_ids=self.info.eos_token_ids,
                    max_tokens=max_tokens,
                    priority=priority,
                    arrival_time=arrival_time or time.time(),
                    parent_id=request_id,
                    index=index,
                    share_prompt_with=children[0] if index else None,
                )
            )
        for child in children:
            self.scheduler.add_request(child)
        incremental = stream or bool(params.stop)
        detokenizers = [self._detokenizer(prompt_token_ids, c.params) if incremental else None for c in children]
        self.parents[request_id] = _Parent(
            prompt if isinstance(prompt, str) else None, prompt_token_ids, children, detokenizers, final_only=final_only
        )

    def abort(self, request_id: str) -> None:
        """Drop a user request (all its completions) and free its blocks now."""
        parent = self.parents.pop(request_id, None)
        for child in parent.children if parent else ():
            self.scheduler.abort(child.request_id)

    def has_unfinished_requests(self) -> bool:
        return self.scheduler.has_unfinished()  # a step in flight for unfinished requests keeps them running

    # ----------------------------------------------------------------- step
    def step(self) -> list[RequestOutput]:
        """Run one batch; return an output for every user request that changed."""
        scheduler_output = self.scheduler.schedule()
        launched = None
        if not scheduler_output.is_empty:
            self.num_prompt_tokens += scheduler_output.num_prompt_tokens
            launched = (scheduler_output, self.runner.launch(scheduler_output))
        done = launched
        if self.config.async_scheduling:  # finish the previous step while this one runs
            done, self._in_flight = self._in_flight, launched
        if done is None:
            return []
        out, handle = done
        updated = self.scheduler.update_from_output(out, self.runner.collect(handle))
        self.num_steps += 1
        touched: dict[str, None] = {}
        for request in updated:
            parent = self.parents[request.parent_id]  # type: ignore[index]
            if request.error is not None:  # failed alone: so do its n - 1 siblings, which share its prompt
                for sibling in parent.children:
                    self.scheduler.fail(sibling, request.error)
            else:
                self.num_generation_tokens += 1
                if parent.detokenizers[request.index] is not None:
                    self._detokenize(request)
            if not parent.final_only or (request.finished and all(c.finished for c in parent.children)):
                touched[request.parent_id] = None  # type: ignore[index]
        return [self._make_output(pid) for pid in touched]

    def _detokenize(self, request: Request) -> None:
        detokenizer = self.parents[request.parent_id].detokenizers[request.index]  # type: ignore[index]
        if detokenizer is None:
            return
        stop = detokenizer.add_token(request.output_token_ids[-1])
        if stop is None:
            if request.finished:
                detokenizer.flush()
        elif request.finished:  # the same token also hit a length limit: the stop string wins
            request.status, request.stop_reason = RequestStatus.FINISHED_STOPPED, stop
        else:
            self.scheduler.finish(request, RequestStatus.FINISHED_STOPPED, stop)

    def _make_output(self, parent_id: str) -> RequestOutput:
        parent = self.parents[parent_id]
        finished = all(c.finished for c in parent.children)
        outputs = [self._completion(c, self._text(parent, c)) for c in parent.children]
        first = parent.children[0]
        firsts = [c.first_token_time for c in parent.children if c.first_token_time]
        metrics = RequestMetrics(
            arrival_time=first.arrival_time,
            first_token_time=min(firsts) if firsts else None,
            finished_time=max((c.finished_time or 0.0) for c in parent.children) if finished else None,
            num_preemptions=sum(c.num_preemptions for c in parent.children),
            first_scheduled_time=min(
                (c.first_scheduled_time for c in parent.children if c.first_scheduled_time), default=None
            ),
        )
        if finished:
            del self.parents[parent_id]
        return RequestOutput(
            request_id=parent_id,
            prompt=parent.prompt,
            prompt_token_ids=parent.prompt_token_ids,
            outputs=outputs,
            finished=finished,
            num_cached_tokens=first.num_cached_tokens,
            metrics=metrics,
            error=next((c.error for c in parent.children if c.error is not None), None),
        )

    def _text(self, parent: _Parent, request: Request) -> str:
        detokenizer = parent.detokenizers[request.index]
        if detokenizer is not None:
            return detokenizer.visible_text(request.finished)
        if not request.finished or self.tokenizer is None or not request.params.detokenize:
            return ""
        if request.index not in parent.final_texts:
            parent.final_texts[request.index] = self.tokenizer.decode(
                request.output_token_ids, skip_special_tokens=request.params.skip_special_tokens
            )
        return parent.final_texts[request.index]

    @staticmethod
    def _completion(request: Request, text: str) -> CompletionOutput:
        return CompletionOutput(
            index=request.index,
            text=text,
            token_ids=list(request.output_token_ids),
            logprobs=list(request.logprobs) if request.params.logprobs is not None else None,
            finish_reason=request.finish_reason,
            stop_reason=request.stop_reason,
        )

    def _detokenizer(self, prompt_token_ids: list[int], params: SamplingParams) -> IncrementalDetokenizer | None:
        if self.tokenizer is None or not params.detokenize:
            return None
        return IncrementalDetokenizer(self.tokenizer, prompt_token_ids, params)

    # ----------------------------------------------------------------- stats
    def stats(self) -> EngineStats:
        pool = self.kv_cache.pool
        return EngineStats(
            num_running=self.scheduler.num_running,
            num_waiting=self.scheduler.num_waiting,
            num_free_blocks=pool.num_free_blocks,
            num_blocks=pool.num_blocks,
            kv_cache_usage=pool.usage(),
            num_preemptions=self.scheduler.num_preemptions,
            prefix_cache_queries=self.kv_cache.stats.queries,
            prefix_cache_hits=self.kv_cache.stats.hits,
            num_prompt_tokens=self.num_prompt_tokens,
            num_generation_tokens=self.num_generation_tokens,
            num_steps=self.num_steps,
        )
