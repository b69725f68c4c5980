"""The engine core's side of speculative decoding: whether this step speculates, and the proposals.

Per step the core asks `begin_step` (the policy's decision for the running batch); when it says yes,
the core first collects the step in flight (proposals are made from tokens on the host, and the
scheduler must know how many proposals the last step kept), then passes `propose()`'s proposals to
the scheduler. `end_step` records how long the step took and what it generated, for the policy.

A request gets proposals when it is decoding (only its last token left to compute, none pending), does
not read its history while sampling (penalties would change the target's distribution along the
proposals; such requests decode as usual), and may still generate two tokens or more. An n-gram
proposal may be empty (no match); a draft model's are placeholders the runner fills in on the device.
Pure Python: no torch.
"""

from __future__ import annotations

import time

from model_optimizer.runtime.engine.request import Request
from model_optimizer.runtime.spec_decode.config import SpeculativeConfig
from model_optimizer.runtime.spec_decode.counters import DRAFT_TOKEN
from model_optimizer.runtime.spec_decode.ngram import NgramProposer
from model_optimizer.runtime.spec_decode.policy import SpecPolicy


class Speculator:
    def __init__(self, config: SpeculativeConfig) -> None:
        self.config = config
        self.policy = SpecPolicy(config)
        self.ngram = (
            None
            if config.is_draft_model
            else NgramProposer(config.num_speculative_tokens, config.prompt_lookup_min, config.prompt_lookup_max)
        )
        self._step: tuple[float, int, bool] | None = None
        """(start, running requests, speculated) of the step in progress."""
        self._last_mode: bool | None = None

    def begin_step(self, running: list[Request]) -> bool:
        """Whether this step speculates; starts timing it."""
        speculate = self.policy.should_speculate(len(running))
        self._step = (time.perf_counter(), len(running), speculate)
        return speculate

    def end_step(self, num_tokens: int) -> None:
        """The step has ended, having generated `num_tokens` tokens: record it unless it switched modes."""
        if self._step is None:
            return
        start, num_running, speculated = self._step
        self._step = None
        if self._last_mode == speculated:
            self.policy.record(num_running, speculated, time.perf_counter() - start, num_tokens)
        self._last_mode = speculated

    def propose(self, running: list[Request]) -> dict[str, list[int]]:
        """Request id -> proposed tokens, for the running requests that may verify some this step."""
        k = self.config.num_speculative_tokens
        proposals = {}
        for request in running:
            if request.num_pending or request.num_computed_tokens != request.num_tokens - 1:
                continue
            room = min(k, request.max_tokens - request.num_output_tokens - 1)
            if room <= 0 or request.params.needs_history:
                continue
            spec = [DRAFT_TOKEN] * room if self.ngram is None else self.ngram.propose(request, room)
            if spec:
                proposals[request.request_id] = spec
        return proposals
