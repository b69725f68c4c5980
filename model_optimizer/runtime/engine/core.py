"""EngineCore: the scheduler, the KV blocks and the model runner, stepping; token ids in, token ids out.

Requests come in and are aborted between steps (engine/core_requests.py, mixed in).
One step is schedule -> launch -> collect -> update, and what it changed goes out as one
`CoreOutputs` (engine/messages.py), its rows written by `CoreNews` (engine/core_news.py). The core
knows no text and no output shapes: a frontend turns its rows into RequestOutputs
(engine/output_processor.py), in this process (`LLMEngine`, the in-process server) or in another one
(`mopt serve`, core_process.py).

Pure Python: the model runner is passed in (any StepRunner, engine/step_runner.py), so the core runs on a CPU with a fake.

Asynchronous scheduling (the default), written down once here: at most one step is in flight,
launched on the device but not yet collected. The core alone holds it (`_in_flight`) and hands it
to `runner.launch` for the next step, whose inputs read its sampled ids on the device where it left
them; the scheduler counts those owed tokens as `Request.num_pending`. So each `step()` launches
batch k + 1 before it waits for batch k: the host schedules and prepares inputs while the device
computes, and outputs trail the launches by one step. When a sampling request of the new step
reads its generated tokens on the host (penalties, `SchedulerOutput.needs_history`), the step in
flight is collected first and nothing is pending. Every handle is collected exactly once, in
launch order.

Speculative decoding (spec_decode/) makes a step synchronous: when the policy says the batch
speculates, the step in flight is collected before scheduling (proposals come from tokens on the host,
and the scheduler must know how many proposals the last step kept before it schedules the next), and
a step that verifies proposals is collected before `step()` returns. What that costs, the host work of
one step no longer hidden behind the device's, is part of what the policy measures when it decides
whether speculating pays (only on steady steps: spec_decode/policy.py).

A step whose sampling rows include requests constrained by a grammar (runtime/structured) splits its
launch in two: the forward of batch k + 1 is queued, batch k is collected and its tokens advance the
grammars, and the masks of batch k + 1 start filling in a thread (engine/constrained.py), all before
the scheduler appends those tokens (it does so while the masks fill); its
sampling is queued with them in the next step, once this step's rows are out and the
next batch is scheduled. The masks depend on the tokens just collected, so this is the earliest they
can start; the device runs the forward meanwhile, and the host publishes and schedules, so the fill
costs a step only what outlasts both. The next batch's inputs are written before that wait (a runner
with `prepare`/`submit`, the ModelRunner): once the masks are in, the sampling and the next forward are
queued back to back, so the device, idle by then, waits for nothing but the two launches. (Without
asynchronous scheduling the sampling is queued at once.) A constrained request joins the scheduler's
queue once its grammar has compiled, in a thread: the steps of the others go on.

The two do not share a step: while any grammar is live, no request speculates (a grammar would
have to check each proposed token and mask each verified position).
"""

from __future__ import annotations

import logging
import time
from concurrent.futures import Future
from dataclasses import dataclass
from typing import Any

from model_optimizer.runtime.config import EngineConfig
from model_optimizer.runtime.engine.constrained import ConstrainedDecoding
from model_optimizer.runtime.engine.core_news import CoreNews
from model_optimizer.runtime.engine.core_requests import CoreRequests
from model_optimizer.runtime.engine.core_stats import kv_cache_fields, scheduler_fields, spec_fields
from model_optimizer.runtime.engine.host_kv_tier import HostKVTier
from model_optimizer.runtime.engine.input_processor import FitLimits
from model_optimizer.runtime.engine.kv_cache import KVCacheManager, check_kv_capacity
from model_optimizer.runtime.engine.messages import CoreOutputs, EngineStats
from model_optimizer.runtime.engine.request import NONFINITE_ERROR, Request, RequestStatus
from model_optimizer.runtime.engine.scheduler import Scheduler, SchedulerOutput
from model_optimizer.runtime.engine.scheduler_config import SchedulerConfig
from model_optimizer.runtime.engine.stall_bound import DecodeStallBound
from model_optimizer.runtime.engine.step_runner import StepRunner
from model_optimizer.runtime.sampler_output import StepResults
from model_optimizer.runtime.spec_decode.speculator import Speculator

logger = logging.getLogger(__name__)

DEFAULT_CPU_STALL = 2.0
"""max_decode_stall when unset and the model runs on the CPU."""


@dataclass(frozen=True)
class _InFlight:
    """A launched step: what was scheduled and the runner's handle to collect it with."""

    scheduler_output: SchedulerOutput
    handle: Any
    mask: Future | None = None
    """Grammar masks being filled: the step's sampling is not queued yet (see the module docstring)."""


@dataclass
class ModelInfo:
    """What the engine needs to know of the model, without touching torch."""

    vocab_size: int
    max_model_len: int
    eos_token_ids: frozenset[int]
    num_kv_blocks: int
    device_type: str = "cpu"
    """Where the model runs ("cpu", "cuda"): some defaults depend on it (max_decode_stall)."""
    num_host_kv_blocks: int = 0
    """Blocks of the host KV tier the runner allocated (kv_offloading_size); 0: no tier."""


def fit_limits(config: EngineConfig, info: ModelInfo) -> FitLimits:
    """The limits a request must fit, for the frontend's check before it sends one (input_processor)."""
    return FitLimits(
        max_model_len=info.max_model_len,
        num_blocks=info.num_kv_blocks,
        block_size=config.block_size,
        max_num_batched_tokens=config.max_num_batched_tokens,
        chunked_prefill=config.enable_chunked_prefill,
    )


def _scheduler_config(config: EngineConfig, info: ModelInfo) -> SchedulerConfig:
    return SchedulerConfig(
        max_num_seqs=config.max_num_seqs,
        max_num_batched_tokens=config.max_num_batched_tokens,
        max_model_len=info.max_model_len,
        enable_chunked_prefill=config.enable_chunked_prefill,
        policy=config.scheduling_policy,
        max_num_partial_prefills=config.max_num_partial_prefills,
        long_prefill_token_threshold=config.long_prefill_token_threshold,
        preemption_mode=config.preemption_mode,
    )


class EngineCore(CoreRequests):
    def __init__(
        self, config: EngineConfig, runner: StepRunner, info: ModelInfo, num_clients: int = 1, tokenizer: Any = None
    ) -> None:
        self.config = config
        self.tokenizer = tokenizer
        """The model's tokenizer: structured outputs build their grammar engine's vocabulary from it."""
        self.num_clients = num_clients
        """Frontends whose requests it runs: each step's rows are split by the client that sent them."""
        self.runner = runner
        self.info = info
        check_kv_capacity(info.num_kv_blocks, config.block_size, info.max_model_len)
        tier = HostKVTier(info.num_host_kv_blocks) if info.num_host_kv_blocks else None
        self.kv_cache = KVCacheManager(info.num_kv_blocks, config.block_size, config.enable_prefix_caching, tier)
        self.scheduler = Scheduler(_scheduler_config(config, info), self.kv_cache)
        self.limits = fit_limits(config, info)
        self.groups: dict[str, list[Request]] = {}
        """Request id -> its n completions, until the last has finished."""
        self.client_of: dict[str, int] = {}
        """Request id -> the frontend it came from."""
        self.num_prompt_tokens = 0
        self.num_generation_tokens = 0
        self.num_steps = 0
        self._in_flight: _InFlight | None = None
        """The launched step whose tokens have not been collected yet (see the module docstring)."""
        self._news = self._new_news()
        """Per client: rows made between steps, sent with the next outputs (engine/core_news.py)."""
        stall = config.max_decode_stall
        if stall is None:
            stall = DEFAULT_CPU_STALL if info.device_type == "cpu" else 0
        self.stall_bound = DecodeStallBound(stall, min_tokens=config.block_size) if stall else None
        """Caps prefill tokens while requests decode (engine/stall_bound.py); None when off."""
        self.clock = time.perf_counter
        spec = config.speculative
        self.speculator = Speculator(spec, max_model_len=info.max_model_len) if spec is not None else None
        self._num_step_tokens = 0
        self.constrained: ConstrainedDecoding | None = None
        """Structured outputs' grammars and masks; made with the first constrained request."""

    # ----------------------------------------------------------------- lifecycle
    def close(self) -> None:
        """Stop the runner's tensor-parallel workers (where it has any) and the grammar threads; the core
        takes no more steps afterwards."""
        close = getattr(self.runner, "close", None)
        if close is not None:
            close()
        if self.constrained is not None:
            self.constrained.close()

    def reset_prefix_cache(self) -> bool:
        """Forget the cached prefixes no running request holds, between steps (vLLM's reset_prefix_cache, for a
        benchmark's cold runs or after new weights); True when nothing is left cached, False (and a warning)
        when running requests still hold cached blocks."""
        if self.kv_cache.reset_prefix_cache():
            return True
        num_held = len(self.kv_cache.pool.cached)
        logger.warning("prefix cache reset in part: %d cached blocks are held by running requests", num_held)
        return False

    def has_unfinished_requests(self) -> bool:
        # a step in flight for unfinished requests keeps them running
        return self.scheduler.has_unfinished() or bool(self.constrained is not None and self.constrained.compiling)

    # ----------------------------------------------------------------- grammars
    def _constrained(self) -> ConstrainedDecoding:
        if self.constrained is None:  # ValueError when the model or runner cannot constrain sampling
            info = self.info
            self.constrained = ConstrainedDecoding(self.runner, self.tokenizer, info.vocab_size, info.eos_token_ids)
        return self.constrained

    def _grammars_live(self) -> bool:
        return self.constrained is not None and self.constrained.manager.num_matchers > 0

    def _admit_compiled(self) -> None:
        """Queue the requests whose grammar has compiled; a row for each whose compile failed."""
        constrained = self.constrained
        if constrained is None or not constrained.compiling:
            return
        idle = not self.scheduler.has_unfinished() and self._in_flight is None
        for request_id, children in constrained.admit_compiled(self.scheduler, idle):
            for child in children:
                if child.error is not None:
                    self._news.finished(child)
            self._forget_if_done(request_id)

    def _prepare_early(self, out: SchedulerOutput, previous: _InFlight | None) -> Any | None:
        """The inputs of `out` written before `previous`'s masks are waited for, when its sampling waits
        for them and the runner can split a launch (ModelRunner.prepare): the host work of the launch
        then overlaps the fill instead of following the sampling while the device has nothing to run."""
        if previous is None or previous.mask is None or out.is_empty or out.needs_history:
            return None
        prepare = getattr(self.runner, "prepare", None)
        return prepare(out, previous.handle) if prepare is not None else None

    def _launch(
        self, out: SchedulerOutput, previous: _InFlight | None, news: CoreNews, prepared: Any | None = None
    ) -> tuple[_InFlight, bool]:
        """Queue a step: whole, or (grammar-constrained rows) its forward, then `previous` collected and the
        masks started. `prepared`: its inputs, already written (_prepare_early). Returns the step and
        whether `previous` was collected."""
        pending = previous.handle if previous is not None else None
        rows = self.constrained.masked_rows(self.scheduler, out) if self.constrained is not None else None
        if prepared is not None:
            handle = self.runner.submit(prepared, pending, sample=rows is None)  # type: ignore[attr-defined]
        elif rows is None:
            handle = self.runner.launch(out, pending)
        else:
            handle = self.runner.launch(out, pending, sample=False)  # type: ignore[call-arg]
        if rows is None:
            return _InFlight(out, handle), False
        # the previous step's tokens advance the grammars the masks start from: the masks start as soon as the
        # tokens are on the host, before the scheduler appends them and the rows are built (see _collect)
        if previous is not None:
            updated, mask = self._collect(previous, news, rows)
        else:
            updated, mask = None, self.constrained.fill(rows, background=self.config.async_scheduling)  # type: ignore[union-attr]
        step = _InFlight(out, handle, mask)
        if updated is not None:
            self._report(updated, news)
        return (step if self.config.async_scheduling else self._sample(step)), previous is not None

    def _sampled(self, step: _InFlight) -> _InFlight:
        """`step` with its sampling queued. A masked step's is queued after scheduling the next batch, not
        before: scheduling reads nothing of it, so the device then runs this sampling and the next forward
        back to back instead of idling while the host schedules, and the masks get that time to fill."""
        return self._sample(step) if step.mask is not None else step

    def _sample(self, step: _InFlight) -> _InFlight:
        """Queue the sampling of a step whose masks were being filled."""
        mask = self.constrained.wait(step.mask)  # type: ignore[union-attr, arg-type]
        return _InFlight(step.scheduler_output, self.runner.sample(step.handle, mask))  # type: ignore[attr-defined]

    # ----------------------------------------------------------------- step
    def step(self) -> list[CoreOutputs]:
        """Run one batch; return, per client, the rows it (and the commands before it) changed."""
        self._admit_compiled()
        started = self.clock()
        bound = self.stall_bound
        previous, self._in_flight = self._in_flight, None
        news, self._news = self._news, self._new_news()
        self._num_step_tokens = 0
        proposals = None
        if (
            self.speculator is not None
            and not self._grammars_live()
            and self.speculator.begin_step(self.scheduler.running)
        ):
            if previous is not None:  # proposals are made from its tokens, on the host
                self._finish(self._sampled(previous), news)
                previous = None
            proposals = self.speculator.propose(self.scheduler.running)
        max_prefill = bound.max_prefill_tokens() if bound is not None else None
        scheduler_output = self.scheduler.schedule(proposals, max_prefill)
        prepared = self._prepare_early(scheduler_output, previous)
        if previous is not None:  # its masks were filled meanwhile (and while scheduling: see _sampled)
            previous = self._sampled(previous)
        if previous is not None and scheduler_output.needs_history:  # its tokens must be on the host first
            self._finish(previous, news)
            previous = None
        launched = None
        if not scheduler_output.is_empty:
            self.num_prompt_tokens += scheduler_output.num_prompt_tokens
            launched, collected = self._launch(scheduler_output, previous, news, prepared)
            if collected:
                previous = None
        done = launched
        if self.config.async_scheduling and not scheduler_output.spec_token_ids:
            done, self._in_flight = previous, launched  # collect the previous step while this one runs
        if done is not None:
            self._finish(done, news)
        if bound is not None and not scheduler_output.is_empty:  # what this step's tokens cost (CPU: at launch)
            bound.observe(self.clock() - started, _num_prefill_tokens(scheduler_output))
        if self.speculator is not None:
            self.speculator.end_step(self._num_step_tokens, scheduler_output.num_prompt_tokens)
        return news.build(self.stats())

    def take_news(self) -> list[CoreOutputs]:
        """Per client, the rows made since the last step and the stats (what commands changed), without stepping."""
        news, self._news = self._news, self._new_news()
        return news.build(self.stats())

    def _new_news(self) -> CoreNews:
        return CoreNews(self.num_clients, self.client_of)

    def _finish(self, step: _InFlight, news: CoreNews) -> None:
        """Collect a launched step's tokens, apply them, and add a row for every completion they changed."""
        self._report(self._collect(step, news)[0], news)

    def _collect(
        self, step: _InFlight, news: CoreNews, rows: list[Request | None] | None = None
    ) -> tuple[list[Request], Future | None]:
        """A launched step's tokens applied to its requests and grammars (its prompt logprobs reported):
        the requests they changed, whose rows `_report` adds. `rows`: the next step's masked sampling rows,
        whose masks start as soon as the grammars have taken the tokens, while the scheduler appends
        them (only the matchers are read: the scheduler's work hides behind the fill); their future."""
        results = self.runner.collect(step.handle)
        if type(results) is StepResults:  # before the rows: a prompt's last chunk may sample its first token too
            news.prompt_logprobs(results.prompt_logprobs, self.scheduler.prompt_logprob_requests(step.scheduler_output))
        constrained, ended, mask = self.constrained, None, None
        if constrained is not None:
            ended = constrained.take(results, self.scheduler, step.scheduler_output)
            if rows is not None:
                mask = constrained.fill(rows, background=self.config.async_scheduling)
        updated = self.scheduler.update_from_output(step.scheduler_output, results)
        self.num_steps += 1
        if ended:  # a finished grammar ends its request
            constrained.end(ended, self.scheduler)  # type: ignore[union-attr]
        return updated, mask

    def _report(self, updated: list[Request], news: CoreNews) -> None:
        """A row for every completion `updated` changed (after `_collect`)."""
        for request in updated:
            if request.error == NONFINITE_ERROR:  # failed alone: so do its n - 1 siblings, which share its prompt
                self._fail_group(request, news)
            elif request.error is not None:  # its grammar failed: it alone
                news.finished(request)
            else:
                n = news.tokens(request)
                self.num_generation_tokens += n
                self._num_step_tokens += n
        for request in updated:
            self._forget_if_done(request.parent_id)  # type: ignore[arg-type]

    def _fail_group(self, request: Request, news: CoreNews) -> None:
        for sibling in self.groups.get(request.parent_id, [request]):  # type: ignore[arg-type]
            if sibling is request or not sibling.finished:
                self.scheduler.fail(sibling, request.error)  # type: ignore[arg-type]
                news.finished(sibling)

    def stats(self) -> EngineStats:
        """The core's counters since start and each part's fields (engine/core_stats.py), now."""
        return EngineStats(
            **scheduler_fields(self.scheduler),
            **kv_cache_fields(self.kv_cache),
            num_prompt_tokens=self.num_prompt_tokens,
            num_generation_tokens=self.num_generation_tokens,
            num_steps=self.num_steps,
            **(spec_fields(self.scheduler.spec_counters) if self.speculator is not None else {}),
            **(self.constrained.stats() if self.constrained is not None else {}),
        )


def _num_prefill_tokens(out: SchedulerOutput) -> int:
    """Tokens of the step's prefill chunks (requests computing more than the one token of a decode and
    its speculative proposals)."""
    spec = out.spec_token_ids
    return sum(n for rid, n in out.num_scheduled_tokens.items() if n - len(spec.get(rid, ())) > 1)


__all__ = ["EngineCore", "ModelInfo", "RequestStatus", "StepRunner", "fit_limits"]
