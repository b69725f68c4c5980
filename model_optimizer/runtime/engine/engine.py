"""LLMEngine: add requests, step, abort. One step is schedule -> execute -> update -> outputs.

Pure Python: the model runner is passed in (any StepRunner), so the engine runs on CPU with a
fake one. The core moves token ids only; text, stop strings and output shapes are the output
processor's (output_processor.py), prompt checks the input processor's (input_processor.py).

Asynchronous scheduling (the default), written down once here: at most one step is in flight,
launched on the device but not yet collected. The engine alone holds it (`_in_flight`) and hands
it to `runner.launch` for the next step, whose inputs read its sampled ids on the device where it
left them; the scheduler counts those owed tokens as `Request.num_pending`. So each `step()`
launches batch k + 1 before it waits for batch k, the host schedules, prepares inputs and
detokenizes while the device computes, and outputs trail the launches by one step. When a
sampling request of the new step reads its generated tokens on the host (penalties,
`SchedulerOutput.needs_history`), the step in flight is collected first and nothing is pending.
Every handle is collected exactly once, in launch order.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any, Protocol

from model_optimizer.runtime.config import EngineConfig
from model_optimizer.runtime.engine.input_processor import encode_prompt, resolve_max_tokens
from model_optimizer.runtime.engine.kv_cache import KVCacheManager, check_kv_capacity
from model_optimizer.runtime.engine.output_processor import OutputProcessor
from model_optimizer.runtime.engine.outputs import RequestOutput
from model_optimizer.runtime.engine.request import Logprob, Request, RequestStatus
from model_optimizer.runtime.engine.scheduler import Scheduler, SchedulerConfig, SchedulerOutput
from model_optimizer.runtime.sampling_params import SamplingParams


class StepRunner(Protocol):
    """What the engine needs of a model runner (runner/model_runner.py's ModelRunner is the real one)."""

    def launch(self, scheduler_output: SchedulerOutput, pending: Any | None) -> Any:
        """Start computing a step; return a handle to collect it with. `pending` is the handle of the
        step still in flight (None if there is none): tokens this step needs but the host has not got
        yet are read from it on the device."""

    def collect(self, handle: Any) -> dict[str, tuple[int, Logprob | None]]:
        """Wait for a launched step: request id -> (sampled token id, logprob or None). Once per handle."""


@dataclass(frozen=True)
class _InFlight:
    """A launched step: what was scheduled and the runner's handle to collect it with."""

    scheduler_output: SchedulerOutput
    handle: Any


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


class LLMEngine:
    def __init__(self, config: EngineConfig, runner: StepRunner, tokenizer: Any, info: ModelInfo) -> None:
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
        self.groups: dict[str, list[Request]] = {}
        """User request id -> its n completions, until its last output."""
        self.output_processor = OutputProcessor(tokenizer)
        self.num_prompt_tokens = 0
        self.num_generation_tokens = 0
        self.num_steps = 0
        self._in_flight: _InFlight | None = None
        """The launched step whose tokens have not been collected yet (see the module docstring)."""

    # ----------------------------------------------------------------- requests
    def add_request(
        self,
        request_id: str,
        prompt: str | list[int],
        params: SamplingParams | None = None,
        priority: int = 0,
        arrival_time: float | None = None,
        stream: bool = False,
    ) -> None:
        """Queue a request. Raises ValueError when it is malformed or could never fit.

        `params.output_kind` says what each output holds (see RequestOutputKind). `stream` matters
        only for CUMULATIVE: text is decoded as tokens arrive instead of once at finish.
        """
        if request_id in self.groups:
            raise ValueError(f"request id {request_id!r} is already in use")
        params = params or SamplingParams()
        prompt_token_ids = encode_prompt(self.tokenizer, prompt, self.info.vocab_size)
        max_tokens = resolve_max_tokens(len(prompt_token_ids), params, self.info.max_model_len)
        children: list[Request] = []
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
        for child in children:  # the first one is checked (check_fits) before any is queued; the rest are alike
            self.scheduler.add_request(child)
        self.groups[request_id] = children
        self.output_processor.add_request(request_id, prompt if isinstance(prompt, str) else None, children, stream)

    def abort(self, request_id: str) -> RequestOutput | None:
        """Drop a user request (all its completions) and free its blocks now; returns its last output
        (finish_reason 'abort' on the completions still running), or None for an unknown id."""
        children = self.groups.pop(request_id, None)
        if children is None:
            return None
        for child in children:
            self.scheduler.abort(child.request_id)
        output = self.output_processor.abort(request_id)
        self.output_processor.drop(request_id)
        return output

    def has_unfinished_requests(self) -> bool:
        return self.scheduler.has_unfinished()  # a step in flight for unfinished requests keeps them running

    # ----------------------------------------------------------------- step
    def step(self) -> list[RequestOutput]:
        """Run one batch; return an output for every user request with something to report."""
        scheduler_output = self.scheduler.schedule()
        previous, self._in_flight = self._in_flight, None
        outputs = []
        if previous is not None and scheduler_output.needs_history:  # its tokens must be on the host first
            outputs, previous = self._finish(previous), None
        launched = None
        if not scheduler_output.is_empty:
            self.num_prompt_tokens += scheduler_output.num_prompt_tokens
            handle = self.runner.launch(scheduler_output, previous.handle if previous is not None else None)
            launched = _InFlight(scheduler_output, handle)
        done = launched
        if self.config.async_scheduling:  # finish the previous step while this one runs
            done, self._in_flight = previous, launched
        return outputs + self._finish(done) if done is not None else outputs

    def _finish(self, step: _InFlight) -> list[RequestOutput]:
        """Collect a launched step's tokens, apply them, and build the outputs they change."""
        updated = self.scheduler.update_from_output(step.scheduler_output, self.runner.collect(step.handle))
        self.num_steps += 1
        for request in updated:
            if request.error is not None:  # failed alone: so do its n - 1 siblings, which share its prompt
                for sibling in self.groups[request.parent_id]:  # type: ignore[index]
                    self.scheduler.fail(sibling, request.error)
                continue
            self.num_generation_tokens += 1
            stop = self.output_processor.detokenize(request)
            if stop is not None:
                self._stop_string(request, stop)
        outputs = self.output_processor.make_outputs(updated)
        for output in outputs:
            if output.finished:
                del self.groups[output.request_id]
        return outputs

    def _stop_string(self, request: Request, stop: str) -> None:
        if request.finished:  # the same token also hit a length limit: the stop string wins
            request.status, request.stop_reason = RequestStatus.FINISHED_STOPPED, stop
        else:
            self.scheduler.finish(request, RequestStatus.FINISHED_STOPPED, stop)

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
