"""How requests move between the scheduler's queues outside admission (scheduler.py's module docstring
states the rule): into the waiting queue in policy order (new or preempted), out of it, preemption of a
running request for its blocks, and finishing one (a stop, an abort, a failure), its blocks freed."""

from __future__ import annotations

import bisect
import time
from typing import TYPE_CHECKING

from model_optimizer.runtime.engine.request import Request, RequestStatus
from model_optimizer.runtime.engine.scheduler_output import SchedulerOutput

if TYPE_CHECKING:
    from model_optimizer.runtime.engine.kv_cache import KVCacheManager
    from model_optimizer.runtime.engine.scheduler_config import SchedulerConfig


class RequestQueues:
    """Mixed into Scheduler: its queues, block manager and per-request bookkeeping."""

    config: SchedulerConfig
    kv_cache: KVCacheManager
    waiting: list[Request]
    running: list[Request]
    requests: dict[str, Request]
    finished_ids: set[str]
    num_preemptions: int
    _order: dict[str, tuple]
    _num_sent_blocks: dict[str, int]
    _long_threshold: int
    _short_waiting: set[str]
    _trimmed: set[str]

    def _enqueue(self, request: Request) -> None:
        bisect.insort(self.waiting, request, key=lambda r: self._order[r.request_id])
        if request.num_tokens - request.num_swapped_tokens <= self._long_threshold:  # while it waits, only swapped KV
            self._short_waiting.add(request.request_id)

    def _dequeue(self, request: Request) -> None:
        self.waiting.remove(request)
        self._short_waiting.discard(request.request_id)

    def _pick_victim(self, candidates: list[Request]) -> Request:
        """Lowest priority, latest arrival among requests not yet scheduled this step (under the priority
        policy `running` is in priority order, so every lower-priority request is among them)."""
        return max(candidates, key=lambda r: self._order[r.request_id])

    def _preempt(self, request: Request, out: SchedulerOutput) -> None:
        self.running.remove(request)
        if self.config.preemption_mode == "swap" and not request.needs_prompt_logprobs:
            request.num_swapped_tokens = request.num_computed_tokens if self.kv_cache.swap_out(request) else 0
        self.kv_cache.free(request)
        self._num_sent_blocks.pop(request.request_id, None)
        self._trimmed.discard(request.request_id)
        request.status = RequestStatus.PREEMPTED
        request.num_computed_tokens = 0
        request.num_preemptions += 1
        self.num_preemptions += 1
        out.finished_request_ids.add(request.request_id)
        self._enqueue(request)

    def abort(self, request_id: str) -> Request | None:
        """Finish a request now and free its blocks; unknown or finished ids are ignored."""
        request = self.requests.get(request_id)
        if request is None or request.finished:
            return None
        self._remove(request)
        request.status = RequestStatus.FINISHED_ABORTED
        self._finish(request)
        return request

    def finish(self, request: Request, status: RequestStatus, stop_reason: str | None = None) -> None:
        """Finish a running request for a reason found outside the core (a stop string)."""
        if request.finished:
            return
        self._remove(request)
        request.status = status
        request.stop_reason = stop_reason
        self._finish(request)

    def fail(self, request: Request, error: str) -> None:
        """Finish a request that cannot go on (its logits were NaN/inf) with status FINISHED_ERROR.

        Its blocks are freed and every prefix-cache entry of its tokens is dropped: the NaN may sit in
        any of them, and a later request sharing the prefix must compute its own.
        """
        if request.finished:
            return
        self._remove(request)
        request.status = RequestStatus.FINISHED_ERROR
        request.error = error
        self.kv_cache.forget(request)
        self._finish(request)

    def _remove(self, request: Request) -> None:
        """Take a request out of the running list, or out of the waiting queue if it was preempted."""
        if request in self.running:
            self.running.remove(request)
        else:
            self._dequeue(request)

    def _finish(self, request: Request) -> None:
        self.kv_cache.free(request)
        if request.num_swapped_tokens:  # finished (aborted) while swapped out
            self.kv_cache.drop_swapped(request)
            request.num_swapped_tokens = 0
        self._num_sent_blocks.pop(request.request_id, None)
        self._trimmed.discard(request.request_id)
        self._order.pop(request.request_id, None)
        self.requests.pop(request.request_id, None)
        self.finished_ids.add(request.request_id)
        request.finished_time = request.finished_time or time.time()
