"""Verification of proposals inside a step: which rows sample, and which tokens the target keeps.

A request verifying k proposals ran 1 + k tokens through the target: its last real token and the
proposals. Each of those rows gives the target's distribution for the next position, so the step
samples every one of them, at its own output position, exactly as a plain step would sample that
position (same params, same seeded noise per (seed, position)). The target keeps the proposals while
they equal its own draw, then its draw at the first mismatch, or at the end (the bonus token): for a
proposal that is one token (n-gram, and any greedy request) that is rejection sampling with the
proposal as a point mass, accepted with probability p(token), otherwise a draw from p without it, and
it keeps more than the distribution: a greedy or seeded request yields exactly the tokens it would
without speculation. So does a seeded request's proposal from a draft model, drawn with the noise the
target draws that position with (rejection.py). A draft model's proposals for an unseeded request that
samples (temperature > 0) come from a distribution q of its own; rejection.py rewrites those requests'
rows so that the same prefix rule applies (accept with probability min(1, p/q), else a draw from the
residual).

The draw happens on the device; the prefix rule runs on the host in `collect`, on ids that came back
anyway, so verification adds no device work but the extra rows' logits and draws.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

import torch

from model_optimizer.runtime.engine.scheduler_output import SchedulerOutput
from model_optimizer.runtime.layers.sampler import SampledLogprobs, Sampler, SamplingInput
from model_optimizer.runtime.runner.input_batch import CachedRequestState
from model_optimizer.runtime.sampler_output import Logprob
from model_optimizer.runtime.spec_decode.config import injected_acceptance
from model_optimizer.runtime.spec_decode.rejection import RejectionBatch


@dataclass
class VerifyRows:
    """The sampling rows of a step with proposals, in batch order, and how they group into requests."""

    rows: list[int]
    """Row of the flat batch (its hidden state) of each sampled position."""
    batch: list[SamplingInput]
    """Per sampled row: the request's params and the output position it samples."""
    states: list[CachedRequestState]
    """Per sampling request (one each, in batch order)."""
    num_rows: list[int]
    """Per sampling request: 1, or 1 + k when it verifies k proposals."""
    drafts: list[list[int]]
    """Per sampling request: its proposals (empty for none); a draft model's are filled in by `set_drafts`."""
    host_drafts: torch.Tensor | None = None
    """Pinned host copy of a draft model's proposals (spec requests x k), complete with the step's ids."""

    def set_drafts(self, draft_ids: torch.Tensor) -> None:
        """Start copying a draft model's proposals (spec requests in batch order, k) to the host."""
        host = torch.empty(draft_ids.shape, dtype=draft_ids.dtype, pin_memory=draft_ids.is_cuda)
        host.copy_(draft_ids, non_blocking=draft_ids.is_cuda)
        self.host_drafts = host


def verify_rows(out: SchedulerOutput, requests: dict[str, CachedRequestState]) -> VerifyRows:
    """Rows to sample for `out`: the last row of each sampling request, all 1 + k rows of one that verifies."""
    spec = out.spec_token_ids
    rows: list[int] = []
    batch: list[SamplingInput] = []
    states, num_rows, drafts = [], [], []
    end = 0
    for request_id, num_new in out.num_scheduled_tokens.items():
        end += num_new
        if request_id not in out.sampling_request_ids:
            continue
        state = requests[request_id]
        proposed = spec.get(request_id, [])
        k = len(proposed)
        first_position = state.num_computed_tokens + num_new - k - len(state.prompt_token_ids)
        for j in range(k + 1):
            rows.append(end - 1 - k + j)
            batch.append(state.sampling_input(first_position + j))
        states.append(state)
        num_rows.append(k + 1)
        drafts.append(proposed)
    return VerifyRows(rows, batch, states, num_rows, drafts)


def proposal_rows(out: SchedulerOutput) -> tuple[list[int], list[tuple[int, int]]]:
    """Where a draft model's proposals go in the step's flat token ids: (rows, (request index among those
    that verify, proposal index)), in batch order."""
    rows, sources = [], []
    end, index = 0, 0
    for request_id, num_new in out.num_scheduled_tokens.items():
        end += num_new
        proposed = out.spec_token_ids.get(request_id)
        if proposed:
            k = len(proposed)
            rows += range(end - k, end)
            sources += [(index, j) for j in range(k)]
            index += 1
    return rows, sources


def rejection_batch(
    rows: VerifyRows, draft_ids: torch.Tensor, draft_probs: dict[int, torch.Tensor]
) -> RejectionBatch | None:
    """The requests whose proposals a draft model sampled from q (unseeded, not greedy), for
    rejection.apply_rejection; None when there are none. `draft_probs`: index among the verifying requests ->
    q (k, vocab)."""
    if not draft_probs:
        return None
    K = draft_ids.shape[1]
    picked, at, spec_index = [], 0, 0
    for state, n in zip(rows.states, rows.num_rows):
        if n > 1:
            if spec_index in draft_probs:
                picked.append((spec_index, state, at, n - 1))
            spec_index += 1
        at += n
    device = draft_ids.device
    vocab = next(iter(draft_probs.values())).shape[-1]
    target_rows = torch.tensor([[at + min(j, k) for j in range(K + 1)] for _, _, at, k in picked], device=device)
    probs = torch.zeros(len(picked), K, vocab, dtype=torch.float32, device=device)
    for r, (i, _, _, k) in enumerate(picked):
        probs[r, :k] = draft_probs[i][:k]
    return RejectionBatch(
        target_rows=target_rows,
        num_draft=torch.tensor([k for *_, k in picked], device=device),
        draft_ids=draft_ids[torch.tensor([i for i, *_ in picked], device=device)],
        draft_probs=probs,
        params=[state.params for _, state, _, _ in picked],
    )


def accepted_prefix(draws: list[int], drafts: list[int], rng: random.Random | None, rate: float | None) -> int:
    """How many proposals are kept: the longest prefix equal to the target's draws (or, with the
    benchmark knob `rate`, a run of independent acceptances with that probability)."""
    k = len(drafts)
    a = 0
    if rate is not None and rng is not None:
        while a < k and rng.random() < rate:
            a += 1
        return a
    while a < k and draws[a] == drafts[a]:
        a += 1
    return a


class Verifier:
    """Groups a verifying step's sampled rows into each request's kept tokens (see the module docstring)."""

    def __init__(self) -> None:
        self.force_acceptance(injected_acceptance())

    def force_acceptance(self, rate: float | None) -> None:
        """Benchmarks only (config.ACCEPTANCE_ENV): accept each proposal with probability `rate` whatever the
        target says; None restores real verification. Draws from a fixed seed, so a sweep is repeatable."""
        self.rate = rate
        self.rng = random.Random(0) if rate is not None else None

    def collect(
        self, rows: VerifyRows, token_ids: list[int], logprobs: SampledLogprobs | None, report: bool
    ) -> dict[str, tuple]:
        """Record each request's kept tokens in its state; when `report` (rank 0), request id -> (token id,
        logprob) for a request that verified nothing, (kept token ids, their logprobs or None) for one that did."""
        per_row = Sampler.results(token_ids, logprobs, rows.batch) if report else None
        row_logprobs = [lp for _, lp in per_row] if per_row is not None and logprobs is not None else None
        results = {}
        for state, n, (kept, kept_logprobs) in zip(
            rows.states, rows.num_rows, self.group(rows, token_ids, row_logprobs)
        ):
            state.output_token_ids.extend(max(t, 0) for t in kept)  # a NaN row's placeholder stays a valid id
            if not report:
                continue
            wanted = state.params.logprobs is not None and kept_logprobs is not None
            if n == 1:
                results[state.request_id] = (kept[0], kept_logprobs[0] if wanted else None)
            else:
                results[state.request_id] = (kept, kept_logprobs if wanted else None)
        return results

    def group(
        self, rows: VerifyRows, token_ids: list[int], logprobs: list[Logprob | None] | None
    ) -> list[tuple[list[int], list[Logprob | None] | None]]:
        """Per sampling request: (the tokens it keeps, their logprobs or None)."""
        host_drafts = rows.host_drafts.tolist() if rows.host_drafts is not None else None
        results = []
        at = spec_index = 0
        for proposed, n in zip(rows.drafts, rows.num_rows):
            draws = token_ids[at : at + n]
            if n > 1 and host_drafts is not None:
                proposed = host_drafts[spec_index][: n - 1]
            a = accepted_prefix(draws, proposed, self.rng, self.rate) if n > 1 else 0
            if n > 1:
                spec_index += 1
            kept = list(proposed[:a]) + [draws[a]] if self.rate is not None else draws[: a + 1]
            results.append((kept, None if logprobs is None else logprobs[at : at + a + 1]))
            at += n
        return results
