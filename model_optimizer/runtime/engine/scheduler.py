"""Token-budget scheduler.

One rule, no prefill or decode phases: every request has `num_computed_tokens` and `num_tokens`,
and each step hands out at most `max_num_batched_tokens` tokens of work, running requests first,
then waiting ones in queue order. A prompt longer than what is left of the budget is cut into
chunks (chunked prefill); a prefix-cache hit just starts a request with tokens already computed.
When the KV cache runs out of blocks, the lowest-priority, latest-arrived running request is
preempted: its blocks are freed and it goes back to the waiting queue to be recomputed (in chunks
when its prompt and outputs no longer fit one step, even with chunked prefill off). With
`preemption_mode` swap its computed tokens' blocks are first copied to the host KV tier, and when it is
admitted again they are loaded into fresh blocks: it resumes where it stopped, as after a prefix hit
(a request the tier has no room for, or one that still owes prompt logprobs, is recomputed).

Long prefills (more than `long_prefill_token_threshold` tokens left to compute; a waiting prompt
counts by its length) take their tokens last. In the usual order, the first
`max_num_partial_prefills` of them take a chunk of at most that many tokens, the others keep their
place while the shorter requests behind them are served; then the long prefills, in the usual
order, share what the step has left. A short prompt so never waits behind a queue of long ones,
long ones always progress, and the step's budget is filled as before (only the order changes).

Scheduling a step counts its tokens as computed at once, and a step that reaches the end of a
request's known tokens owes it one sampled token (`num_pending`). So the next step can be
scheduled before this one's tokens are back (asynchronous scheduling): a decode whose input is
still pending reads it on the device, where the previous step left it.

Speculative decoding is the same rule with more tokens: a decoding request given k proposals
(`schedule(proposals)`) computes its last token and the k proposed ones, 1 + k tokens of its budget,
and still owes one sampled token. Its step returns the 1 + a tokens the target kept (a proposals
accepted); `num_computed_tokens` then gives back the k - a rejected positions (their KV is
overwritten later) and blocks wholly past the request's end go back to the pool. Proposals never
cost a preemption: a request that cannot get blocks for them runs without.
"""

from __future__ import annotations

import bisect
import itertools
import time
from dataclasses import dataclass, field

from model_optimizer.runtime.engine.input_processor import FitLimits
from model_optimizer.runtime.engine.kv_cache import KVCacheManager
from model_optimizer.runtime.engine.request import NONFINITE_ERROR, NONFINITE_TOKEN, Request, RequestStatus
from model_optimizer.runtime.engine.scheduler_config import SchedulerConfig
from model_optimizer.runtime.engine.scheduler_output import CachedRequestData, NewRequestData, SchedulerOutput
from model_optimizer.runtime.engine.scheduler_queues import RequestQueues
from model_optimizer.runtime.engine.scheduler_spec import SpeculativeSteps
from model_optimizer.runtime.spec_decode.counters import SpecCounters

__all__ = ["CachedRequestData", "NewRequestData", "Scheduler", "SchedulerOutput"]


@dataclass
class _StepBudget:
    """What one `schedule()` call has handed out so far."""

    budget: int
    prefill: int
    """Tokens prefill chunks may still take (the decode-stall bound: see Scheduler.schedule)."""
    num_long: int = 0
    """Long prefills given a first chunk (at most max_num_partial_prefills)."""
    to_grow: list[Request] = field(default_factory=list)
    """Running long prefills, in the usual order, that may take more of what the step leaves."""
    admitted: set[str] = field(default_factory=set)
    """Ids of the requests admitted from the waiting queue this step."""
    stalled: bool = False
    """A waiting request found no blocks: no later one is admitted this step (queue order)."""


class Scheduler(SpeculativeSteps, RequestQueues):
    def __init__(self, config: SchedulerConfig, kv_cache: KVCacheManager) -> None:
        self.config = config
        self.kv_cache = kv_cache
        self.waiting: list[Request] = []
        self.running: list[Request] = []
        self.requests: dict[str, Request] = {}
        self.finished_ids: set[str] = set()
        self.num_preemptions = 0
        self._arrival_seq = itertools.count()
        self._order: dict[str, tuple] = {}
        self._num_sent_blocks: dict[str, int] = {}
        self._long_threshold = config.long_prefill_threshold
        self._short_waiting: set[str] = set()
        """Ids of waiting requests that are not long prefills: the waiting pass looks for these."""
        self._step_ids = itertools.count(1)
        self._sampling: dict[int, list[Request]] = {}
        """Step id -> the requests that step samples for, until update_from_output hands them their tokens.
        Kept here, not in the SchedulerOutput, so the output stays plain data; held by object, not id, so a
        request that finished meanwhile is never confused with a new one under the same id."""
        self._prompt_logprobs: dict[int, dict[str, Request]] = {}
        """Step id -> the requests, by id, whose prompt logprobs that step computes, until it is collected
        (by object, as `_sampling`: a new request under an aborted one's id must not get them)."""
        self.spec_counters = SpecCounters()
        self._trimmed: set[str] = set()
        """Requests whose block table lost blocks to a speculative rollback since the runner last heard of them."""

    # ----------------------------------------------------------------- admission
    def add_request(self, request: Request) -> None:
        self.check_fits(request.num_prompt_tokens, request.max_tokens)
        seq = next(self._arrival_seq)
        self._order[request.request_id] = (request.priority, seq) if self.config.policy == "priority" else (seq,)
        self.requests[request.request_id] = request
        self._enqueue(request)

    def check_fits(self, num_prompt_tokens: int, max_tokens: int) -> None:
        """Refuse up front a request that could never run to completion."""
        FitLimits(
            self.config.max_model_len,
            self.kv_cache.num_blocks,
            self.kv_cache.block_size,
            self.config.max_num_batched_tokens,
            self.config.enable_chunked_prefill,
        ).check(num_prompt_tokens, max_tokens)

    def has_unfinished(self) -> bool:
        return bool(self.waiting or self.running)

    # ----------------------------------------------------------------- schedule
    def schedule(
        self, proposals: dict[str, list[int]] | None = None, max_prefill_tokens: int | None = None
    ) -> SchedulerOutput:
        """The next step. `proposals`: request id -> proposed next tokens, for decoding requests with
        nothing pending (speculative decoding; see the module docstring). `max_prefill_tokens` bounds
        the prefill chunks' tokens while some request decodes (the engine core derives it from
        measured step times, so a long prompt cannot stall running streams); the budget still bounds
        the whole step. It bounds by cutting chunks: without chunked prefill a prompt comes whole."""
        out = SchedulerOutput(step_id=next(self._step_ids), finished_request_ids=self.finished_ids)
        self.finished_ids = set()
        budget = self.config.max_num_batched_tokens
        prefill = budget
        if max_prefill_tokens is not None and self.config.enable_chunked_prefill and self._any_decoding():
            prefill = max_prefill_tokens
        step = _StepBudget(budget, prefill)
        preempted = self._schedule_running(out, step, proposals or {})
        if not preempted:  # after a preemption, no waiting request is admitted
            self._schedule_waiting(out, step, long_ones=False)
        self._grow_long_prefills(out, step)
        if not preempted:
            self._schedule_waiting(out, step, long_ones=True)
        for request_id in out.num_scheduled_tokens:  # block ids once every pass has allocated
            request = self.requests[request_id]
            if request_id in step.admitted:
                out.new_requests.append(self._new_data(request))
            else:
                out.cached_requests.append(self._cached_data(request))
        self._commit(out)
        if self.kv_cache.host_tier is not None and not out.is_empty:  # a swap-out of an empty step waits for the next
            out.kv_saves, out.kv_loads = self.kv_cache.host_tier.take_copies()
        if out.is_empty:  # no step runs: the runner hears of these with the next one
            self.finished_ids = out.finished_request_ids
        return out

    def _any_decoding(self) -> bool:
        return any(r.num_tokens + r.num_pending - r.num_computed_tokens <= 1 for r in self.running)

    def _schedule_running(self, out: SchedulerOutput, step: _StepBudget, proposals: dict[str, list[int]]) -> bool:
        """Running requests in order, preempting the latest arrivals for blocks; True if any was preempted."""
        preempted = False
        threshold = self._long_threshold
        i = 0
        while i < len(self.running) and step.budget > 0:
            request = self.running[i]
            if request.num_output_tokens + request.num_pending >= request.max_tokens:
                i += 1  # its last token is on the way: nothing left to compute
                continue
            num_left = request.num_tokens + request.num_pending - request.num_computed_tokens
            num_new = (
                min(num_left, step.budget) if num_left <= threshold else self._first_share(request, num_left, step)
            )
            if num_new > 1:  # a prefill chunk: within what prefills may take this step
                num_new = min(num_new, step.prefill)
            if num_new == 0:  # a long prefill past the bound: it waits for what the others leave
                i += 1
                continue
            spec = self._fit_proposals(request, proposals, num_left, step.budget)
            spec = self._spare_for_proposals(request, spec, i + 1)
            num_new += len(spec)
            while not self.kv_cache.allocate_slots(request, num_new):
                if spec:  # proposals never cost a preemption
                    num_new, spec = num_new - len(spec), []
                    continue
                victim = self._pick_victim(self.running[i:])
                self._preempt(victim, out)
                preempted = True
                if victim is request:
                    break
            else:
                out.num_scheduled_tokens[request.request_id] = num_new
                if spec:
                    out.spec_token_ids[request.request_id] = spec
                step.budget -= num_new
                if num_new - len(spec) > 1:  # proposals ride on a decode, they are not a prefill
                    step.prefill -= num_new
                i += 1
        return preempted

    def _first_share(self, request: Request, num_left: int, step: _StepBudget) -> int:
        """Tokens a request takes in the first pass: all it can, or a first chunk (or none) if it is long."""
        num_new = min(num_left, step.budget)
        if num_left <= self._long_threshold:
            return num_new
        step.to_grow.append(request)
        if step.num_long >= self.config.max_num_partial_prefills:
            return 0
        step.num_long += 1
        return min(num_new, self._long_threshold)

    def _commit(self, out: SchedulerOutput) -> None:
        """Count the scheduled tokens as computed; a step reaching the end of the known tokens samples one more."""
        spec = out.spec_token_ids
        for request_id, num_new in out.num_scheduled_tokens.items():
            request = self.requests[request_id]
            start = request.num_computed_tokens
            out.num_prompt_tokens += max(min(start + num_new, request.num_prompt_tokens) - start, 0)
            request.num_computed_tokens = start + num_new
            if request.needs_prompt_logprobs:
                self._prompt_logprobs.setdefault(out.step_id, {})[request_id] = request
            num_spec = len(spec[request_id]) if spec and request_id in spec else 0
            if request.num_computed_tokens - num_spec == request.num_tokens + request.num_pending:
                request.num_pending += 1
                out.sampling_request_ids.add(request_id)
                out.needs_history = out.needs_history or request.params.needs_history
                self._sampling.setdefault(out.step_id, []).append(request)

    def _schedule_waiting(self, out: SchedulerOutput, step: _StepBudget, long_ones: bool) -> None:
        """Admit waiting requests in queue order. The first pass (`long_ones` False) passes over long
        prompts once the long-prefill bound is reached; the second admits them with what is left."""
        i = 0
        num_short_ahead = len(self._short_waiting)  # short requests at index i or later
        while (
            not step.stalled
            and i < len(self.waiting)
            and step.budget > 0
            and step.prefill > 0
            and len(self.running) < self.config.max_num_seqs
        ):
            request = self.waiting[i]
            is_short = request.request_id in self._short_waiting
            if not long_ones and not is_short and step.num_long >= self.config.max_num_partial_prefills:
                if not num_short_ahead:
                    return  # nothing but long prompts left: the second pass takes them
                i += 1  # a long prompt past the bound keeps its place; shorter ones behind it go first
                continue
            num_short_ahead -= is_short
            if request.num_pending or self._waits_for_sibling(request):  # preempted with a token still on the way
                i += 1
                continue
            computed = [] if request.num_swapped_tokens else self.kv_cache.computed_blocks(request)
            num_left = request.num_tokens - (request.num_swapped_tokens or len(computed) * self.kv_cache.block_size)
            if num_left > step.budget and not self._may_split(num_left):
                step.stalled = True
            else:
                num_new = min(num_left, step.budget) if long_ones else self._first_share(request, num_left, step)
                num_new = min(num_new, step.prefill)
                if num_new == 0:  # long after all (it grew while it waited): it keeps its place
                    i += 1
                    continue
                step.stalled = not self._admit(request, computed, num_new, out, step)  # else it left the queue

    def _may_split(self, num_left: int) -> bool:
        """Whether a waiting request may compute part of its tokens this step: always with chunked prefill.
        Without it only one no step could hold, a preempted request recomputing its prompt and outputs past
        the budget its prompt had to fit: it would otherwise wait for ever, and the queue behind it."""
        return self.config.enable_chunked_prefill or num_left > self.config.max_num_batched_tokens

    def _admit(self, request: Request, computed: list, num_new: int, out: SchedulerOutput, step: _StepBudget) -> bool:
        """Move a waiting request to running with `num_new` tokens this step; False if blocks are short."""
        swapped = request.num_swapped_tokens
        if swapped:
            if not self.kv_cache.swap_in(request, num_new):
                return False
        elif not self.kv_cache.allocate_slots(request, num_new, computed):
            return False
        self._dequeue(request)
        request.num_computed_tokens = swapped or len(computed) * self.kv_cache.block_size
        request.num_swapped_tokens = 0
        if request.num_preemptions == 0 and request.num_output_tokens == 0:  # counted once, not per retry
            request.num_cached_tokens = request.num_computed_tokens
            self.kv_cache.count_lookup(request, computed)
        request.status = RequestStatus.RUNNING
        request.first_scheduled_time = request.first_scheduled_time or time.time()  # end of its queue time
        if self.config.policy == "priority":  # kept in priority order, so a victim is never before its preemptor
            bisect.insort(self.running, request, key=lambda r: self._order[r.request_id])
        else:
            self.running.append(request)
        out.num_scheduled_tokens[request.request_id] = num_new
        step.admitted.add(request.request_id)
        step.budget -= num_new
        step.prefill -= num_new
        return True

    def _grow_long_prefills(self, out: SchedulerOutput, step: _StepBudget) -> None:
        """Running long prefills, in order, take more of what the step has left."""
        for request in step.to_grow:
            if step.budget <= 0:
                return
            if request.status is not RequestStatus.RUNNING:  # preempted in the running pass
                continue
            scheduled = out.num_scheduled_tokens.get(request.request_id, 0)
            num_more = min(
                request.num_tokens + request.num_pending - request.num_computed_tokens - scheduled,
                step.budget,
                step.prefill,
            )
            if num_more > 0 and self.kv_cache.allocate_slots(request, scheduled + num_more):
                out.num_scheduled_tokens[request.request_id] = scheduled + num_more
                step.budget -= num_more
                step.prefill -= num_more

    def _waits_for_sibling(self, request: Request) -> bool:
        """n > 1 siblings wait until the first has computed the prompt, then share its blocks."""
        sibling = request.share_prompt_with
        if sibling is None or sibling.status is not RequestStatus.RUNNING:
            return False
        return sibling.num_computed_tokens < request.num_prompt_tokens

    def _new_data(self, request: Request) -> NewRequestData:
        block_ids = self.kv_cache.block_ids(request.request_id)
        self._num_sent_blocks[request.request_id] = len(block_ids)
        return NewRequestData(
            request_id=request.request_id,
            prompt_token_ids=request.prompt_token_ids,
            output_token_ids=list(request.output_token_ids),
            params=request.params,
            block_ids=block_ids,
            num_computed_tokens=request.num_computed_tokens,
            prompt_logprobs=request.needs_prompt_logprobs,
        )

    def _cached_data(self, request: Request) -> CachedRequestData:
        sent = self._num_sent_blocks[request.request_id]
        has_new = len(self.kv_cache.block_tables[request.request_id]) > sent
        new_block_ids = self.kv_cache.block_ids(request.request_id, start=sent) if has_new else []
        self._num_sent_blocks[request.request_id] = sent + len(new_block_ids)
        kept = None
        if self._trimmed and request.request_id in self._trimmed:
            self._trimmed.discard(request.request_id)
            kept = sent
        return CachedRequestData(request.request_id, new_block_ids, request.num_computed_tokens, kept)

    # ----------------------------------------------------------------- update
    def update_from_output(self, out: SchedulerOutput, sampled: dict[str, tuple[int, object]]) -> list[Request]:
        """Append the tokens `out` sampled and apply token-level stops; returns the requests that got one,
        or failed.

        `sampled` maps request id to (token id, logprob or None); NONFINITE_TOKEN fails that request
        alone (see `fail`). A request finished or aborted since `out` was scheduled drops its token;
        one preempted since keeps it (it was computed on a valid cache).
        """
        updated = []
        self._prompt_logprobs.pop(out.step_id, None)
        for request in self._sampling.pop(out.step_id, ()):
            request_id = request.request_id
            if request.finished:
                continue
            if request_id not in sampled:
                raise RuntimeError(f"the runner returned no token for request {request_id!r}, which sampled this step")
            request.num_pending -= 1
            token_id, logprob = sampled[request_id]
            if type(token_id) is list:  # verified proposals: the tokens the target kept
                self._append_verified(request, out, token_id, logprob)  # type: ignore[arg-type]
                updated.append(request)
                continue
            request.num_step_tokens = 1
            if token_id == NONFINITE_TOKEN:
                self.fail(request, NONFINITE_ERROR)
                updated.append(request)
                continue
            request.append_output_token(token_id, logprob)  # type: ignore[arg-type]
            if request.num_tokens - request.num_swapped_tokens > self._long_threshold:  # a waiting one may grow long
                self._short_waiting.discard(request_id)
            updated.append(request)
            if request.check_stop():
                self._remove(request)
                self._finish(request)
        return updated

    def prompt_logprob_requests(self, out: SchedulerOutput) -> dict[str, Request]:
        """The requests whose prompt logprobs `out` computes, by id, until `update_from_output` (the objects,
        as `sampling_requests`)."""
        return self._prompt_logprobs.get(out.step_id, {})

    def sampling_requests(self, out: SchedulerOutput) -> list[Request]:
        """The requests `out` samples for, in the runner's row order (`num_scheduled_tokens`' order), until
        `update_from_output` hands them their tokens: the objects, so that a request finished since (and a
        new one under its id) is told apart. A copy: the caller may keep it."""
        return list(self._sampling.get(out.step_id, ()))

    # ----------------------------------------------------------------- stats
    @property
    def num_running(self) -> int:
        return len(self.running)

    @property
    def num_waiting(self) -> int:
        return len(self.waiting)
