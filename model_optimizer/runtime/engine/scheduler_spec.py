"""What speculative decoding adds to the scheduler (scheduler.py's module docstring states the rule): how many
proposals a decoding request verifies, and applying a step that verified them."""

from __future__ import annotations

import itertools
from typing import TYPE_CHECKING, Protocol

from model_optimizer.runtime.engine.request import NONFINITE_ERROR, NONFINITE_TOKEN, Request, RequestStatus
from model_optimizer.runtime.engine.scheduler_output import SchedulerOutput

if TYPE_CHECKING:
    from model_optimizer.runtime.engine.kv_cache import KVCacheManager
    from model_optimizer.runtime.spec_decode.counters import SpecCounters


class _Limits(Protocol):
    """What the speculative steps read of the scheduler's SchedulerConfig (scheduler.py imports this module)."""

    max_model_len: int


class SpeculativeSteps:
    """Mixed into Scheduler: uses its block manager, counters and finishing."""

    config: _Limits
    kv_cache: KVCacheManager
    running: list[Request]
    spec_counters: SpecCounters
    _num_sent_blocks: dict[str, int]
    _trimmed: set[str]

    def _fit_proposals(
        self, request: Request, proposals: dict[str, list[int]], num_left: int, budget: int
    ) -> list[int]:
        """The proposals a decoding request verifies: as many as the step's budget and max_model_len leave.

        Not capped at max_tokens: a request a few tokens from its end verifies all k (the stop rules drop
        what it keeps past the end), so every row of the step computes 1 + k tokens, the one shape the
        verify graphs run (spec_decode/speculator.py says why that matters)."""
        spec = proposals.get(request.request_id) if num_left == 1 and not request.num_pending else None
        if not spec:
            return []
        room = min(budget - 1, self.config.max_model_len - request.num_tokens)
        return spec[: max(room, 0)]

    def _spare_for_proposals(self, request: Request, spec: list[int], position: int) -> list[int]:
        """`spec`, or none of it when the blocks it adds beyond the request's own token would leave fewer free
        blocks than the running requests after it (from `position` on) need for their own next token:
        proposals only take what no one else needs this step, so they never cost another request a
        preemption. Called for every running request each step: the later ones are counted only when the
        free blocks could fall short of one each."""
        if not spec:
            return spec
        kv = self.kv_cache
        own = request.num_computed_tokens + 1
        held = len(kv.block_tables.get(request.request_id, ()))
        extra = kv.blocks_needed(own + len(spec)) - max(kv.blocks_needed(own), held)
        spare = kv.pool.num_free_blocks - extra
        if extra <= 0 or spare >= len(self.running) - position:  # each later request needs one block at most
            return spec
        later = itertools.islice(self.running, position, None)
        reserve = sum(
            1 for r in later if kv.blocks_needed(r.num_computed_tokens + 1) > len(kv.block_tables.get(r.request_id, ()))
        )
        return spec if spare >= reserve else []

    def _append_verified(
        self, request: Request, out: SchedulerOutput, token_ids: list[int], logprobs: list | None
    ) -> None:
        """Apply a step that verified proposals: count them, give back the rejected positions, append the
        kept tokens one by one with the stop rules (an EOS among them ends the request there)."""
        num_spec = len(out.spec_token_ids.get(request.request_id, ()))
        num_accepted = len(token_ids) - 1
        if num_spec:
            self.spec_counters.add(num_spec, num_accepted)
        if request.status is RequestStatus.RUNNING:  # (preempted since: its computed tokens are 0 already)
            request.num_computed_tokens -= num_spec - num_accepted
        if NONFINITE_TOKEN in token_ids:
            request.num_step_tokens = 0
            self.fail(request, NONFINITE_ERROR)
            return
        for i, token_id in enumerate(token_ids):
            request.append_output_token(token_id, logprobs[i] if logprobs else None)
            request.num_step_tokens = i + 1
            if request.check_stop():
                self._remove(request)
                self._finish(request)
                return
        if num_spec > num_accepted and request.status is RequestStatus.RUNNING:
            self._trim(request)

    def _trim(self, request: Request) -> None:
        """Free the blocks wholly past the request's end (rejected proposals' positions); the runner hears
        of it with the request's next CachedRequestData."""
        sent = self._num_sent_blocks.get(request.request_id)
        num_kept = self.kv_cache.trim(request)
        if sent is not None and num_kept < sent:
            self._num_sent_blocks[request.request_id] = num_kept
            self._trimmed.add(request.request_id)
