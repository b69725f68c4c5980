"""The engine core's side of speculative decoding: whether this step speculates, and the proposals.

Per step the core asks `begin_step` (the policy's decision for the running batch); when it says yes,
the core first collects the step in flight (proposals are made from tokens on the host, and the
scheduler must know how many proposals the last step kept), then passes `propose()`'s proposals to
the scheduler. `end_step` records how long the step took and what it generated, for the policy, and
whether it was steady: the same mode and batch-size bucket as the step before, and neither computed
prompt tokens (policy.py says why only those count). A step's time runs from the end of the previous
step to its own end, so what the caller does between steps (the frontend's work on the outputs) is
charged to the mode that leaves it exposed.

Every verifying row verifies exactly k proposals: the verify graphs (runner/decode_runner.py) are
captured for 1 + k tokens per row, and a step that mixes row lengths runs eagerly, several times the
cost of a plain step for a large target (README, "Speculative decoding": the tail of a 64-request run,
where requests reach their end at different steps, ran that way). So a request that
decodes (only its last token left to compute, none pending) gets k proposals: an n-gram proposal is
filled to k (`fill_to`), and a request within k tokens of max_tokens gets all k too (the scheduler
keeps them; what it keeps past the end is dropped). When one decoding request cannot verify k (it
adjusts its logits while sampling: penalties, which read its history, would change the target's
distribution along the proposals, and neither they nor a logit_bias are in the verification; or it is
within k of max_model_len) the step proposes nothing and runs plain. An n-gram
step where no request found a match runs plain too; a draft model's proposals are placeholders the
runner fills in on the device.

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
    def __init__(
        self,
        config: SpeculativeConfig,
        clock: Callable[[], float] = time.perf_counter,
        max_model_len: int | None = None,
    ) -> None:
        self.config = config
        self.max_model_len = max_model_len
        """Positions a request may reach: a request within k of it cannot verify k proposals."""
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
        """Request id -> k proposed tokens, for every running request that decodes; {} (a plain step) when
        one of them cannot verify k (see the module docstring) or, for n-gram, none found a match."""
        k = self.config.num_speculative_tokens
        rows = []
        for request in running:
            if request.num_pending or request.num_computed_tokens != request.num_tokens - 1:
                continue  # prompt tokens left: a prefill step, which no graph runs anyway
            if request.params.adjusts_logits_at(request.num_output_tokens) or (
                self.max_model_len is not None and request.num_tokens + k > self.max_model_len
            ):
                return {}
            rows.append(request)
        if self.ngram is None:
            return {request.request_id: [DRAFT_TOKEN] * k for request in rows}
        found = [(request, self.ngram.propose(request, k)) for request in rows]
        if not any(spec for _, spec in found):
            return {}
        return {request.request_id: fill_to(spec, k, _last_token(request)) for request, spec in found}


def _last_token(request: Request) -> int:
    return request.output_token_ids[-1] if request.output_token_ids else request.prompt_token_ids[-1]


def fill_to(spec: list[int], k: int, last_token: int) -> list[int]:
    """An n-gram proposal filled up to k tokens with repeats of its last token (of the request's last
    token when it is empty). Verifying a filler is exact (it is kept only where the target's own sampling
    accepts it, as any proposal) and, at the batch sizes where speculating pays, costs nothing the
    weights' read did not already."""
    return spec + [spec[-1] if spec else last_token] * (k - len(spec))
