"""The engine core's side of speculative decoding: whether this step speculates, and the proposals.

Per step the core asks `begin_step` (the policy's decision for the running batch); when it says yes,
the core first collects the step in flight (proposals are made from tokens on the host, and the
scheduler must know how many proposals the last step kept), then passes `propose()`'s proposals to
the scheduler. `end_step` records how long the step took and what it generated, for the policy, and
whether it was steady: the same mode and batch-size bucket as the step before, and neither computed
prompt tokens (policy.py says why only those count). A step's time runs from the end of the previous
step to its own end, so what the caller does between steps (the frontend's work on the outputs) is
charged to the mode that leaves it exposed.

A request gets proposals when it is decoding (only its last token left to compute, none pending), does
not read its history while sampling (penalties would change the target's distribution along the
proposals; such requests decode as usual), and may still generate two tokens or more. An n-gram
proposal may be empty (no match); a draft model's are placeholders the runner fills in on the device.
Pure Python: no torch.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

from model_optimizer.runtime.engine.request import Request
from model_optimizer.runtime.spec_decode.config import SpeculativeConfig
from model_optimizer.runtime.spec_decode.counters import DRAFT_TOKEN
from model_optimizer.runtime.spec_decode.ngram import NgramProposer
from model_optimizer.runtime.spec_decode.policy import SpecPolicy, StepSample, bucket_of


@dataclass(frozen=True)
class _Step:
    """The step in progress, or the one that ended last."""

    num_running: int
    speculated: bool
    prefill: bool = False
    """It computed prompt tokens (known once it has ended)."""


class Speculator:
    def __init__(self, config: SpeculativeConfig, clock: Callable[[], float] = time.perf_counter) -> None:
        self.config = config
        self.policy = SpecPolicy(config)
        self.ngram = (
            None
            if config.is_draft_model
            else NgramProposer(config.num_speculative_tokens, config.prompt_lookup_min, config.prompt_lookup_max)
        )
        self.clock = clock
        self._step: _Step | None = None
        self._last: _Step | None = None
        self._last_end: float | None = None

    def begin_step(self, running: list[Request]) -> bool:
        """Whether this step speculates (a running request with prompt tokens left makes it explore nothing)."""
        prefilling = any(r.num_tokens + r.num_pending - r.num_computed_tokens > 1 for r in running)
        speculate = self.policy.should_speculate(len(running), prefilling)
        self._step = _Step(len(running), speculate)
        return speculate

    def end_step(self, num_tokens: int, num_prompt_tokens: int = 0) -> None:
        """The step has ended, having generated `num_tokens` tokens and computed `num_prompt_tokens` of prompts."""
        step, self._step = self._step, None
        if step is None:
            return
        now, last = self.clock(), self._last
        step = _Step(step.num_running, step.speculated, num_prompt_tokens > 0)
        steady = (
            last is not None
            and last.speculated == step.speculated
            and bucket_of(last.num_running) == bucket_of(step.num_running)
            and not (last.prefill or step.prefill)
        )
        seconds = now - self._last_end if self._last_end is not None else 0.0
        self.policy.record(StepSample(step.num_running, step.speculated, seconds, num_tokens, steady))
        self._last, self._last_end = step, now

    def propose(self, running: list[Request]) -> dict[str, list[int]]:
        """Request id -> proposed tokens, for the running requests that may verify some this step."""
        k = self.config.num_speculative_tokens
        proposals, full = {}, []
        for request in running:
            if request.num_pending or request.num_computed_tokens != request.num_tokens - 1:
                continue
            room = min(k, request.max_tokens - request.num_output_tokens - 1)
            if room <= 0 or request.params.needs_history:
                continue
            spec = [DRAFT_TOKEN] * room if self.ngram is None else self.ngram.propose(request, room)
            if room == k:
                full.append((request, spec))
            elif spec:
                proposals[request.request_id] = spec
        if self.ngram is not None and (proposals or any(spec for _, spec in full)):
            for request, spec in full:  # every row k proposals: a step of one shape, which a CUDA graph runs
                last = request.output_token_ids[-1] if request.output_token_ids else request.prompt_token_ids[-1]
                proposals[request.request_id] = fill_to(spec, k, last)
        else:
            proposals.update((request.request_id, spec) for request, spec in full if spec)
        return proposals


def fill_to(spec: list[int], k: int, last_token: int) -> list[int]:
    """An n-gram proposal filled up to k tokens with repeats of its last token (of the request's last
    token when it is empty). The verify graphs are captured for 1 + k tokens per sequence, so a step whose
    rows propose fewer ran eagerly; verifying a filler is exact (it is kept only where the target's own
    sampling accepts it, as any proposal) and, at the batch sizes where speculating pays, costs nothing
    the weights' read did not already."""
    return spec + [spec[-1] if spec else last_token] * (k - len(spec))
