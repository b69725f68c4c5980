"""Rejection sampling for proposals drawn from a draft model's distribution q.

Greedy requests, seeded ones, and any proposal that is a single token (n-gram) need none of this:
verify.py keeps a proposal while it equals the target's own draw. A draft model draws a seeded request's
proposals with the noise the target's sampler draws those output positions with (`draft_sample`): the
proposal is the target's own draw wherever the two distributions lead that noise to the same token (every
time for a draft equal to the target), and the request yields exactly the tokens of a run without
speculation, whichever steps speculate (the policy decides that from measured times, which differ run to
run). An unseeded request that samples (temperature > 0) proposes d ~ q, and keeping the target's
distribution p then takes the standard rule, applied position by position: accept d with probability
min(1, p(d) / q(d)); at the first rejection emit a token drawn from the residual max(0, p - q)
(normalized) and stop; when every proposal is accepted the target's own draw at the next position is the
bonus token. Each emitted token is then distributed exactly as p given the tokens before it
(tests/runtime/spec_decode/test_rejection.py checks this on a small vocabulary against the exact
distribution).

`apply_rejection` rewrites a verifying step's sampled rows so that verify.py's prefix rule (keep
proposals while the row's token equals them, then the row's token) yields exactly this: accepted rows
hold their proposal, the first rejected row holds the residual draw (never the rejected proposal, whose
residual is 0), and a fully accepted request keeps its last row's draw.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from model_optimizer.runtime.device import to_device
from model_optimizer.runtime.layers.sampler import Sampler, SamplingInput, _filtered_probs
from model_optimizer.runtime.sampling_params import SamplingParams


def verified_by_rejection(params: SamplingParams) -> bool:
    """Whether a request's draft proposals go through the rejection rule: it samples, without a seed."""
    return not params.greedy and params.seed is None


def draft_sample(
    logits: torch.Tensor, batch: list[SamplingInput], sampler: Sampler
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """A draft model's proposals: (ids (rows,) int64, q (rows, vocab) float32, or None when no row is verified
    by rejection).

    Greedy rows take the argmax. Seeded rows draw as the target's sampler draws their output position
    (`sampler`, the draft's own Sampler: the same rule, and noise keyed by seed and position alone). Both are
    verified as point masses; their q rows are unused. The other rows draw from their filtered distribution
    (temperature, top-k, top-p, min-p), which is q, with the sampler's generator."""
    ids = logits.argmax(dim=-1)
    seeded = [i for i, b in enumerate(batch) if not b.params.greedy and b.params.seed is not None]
    if seeded:
        rows = to_device(seeded, logits.device, torch.int64)
        ids[rows] = sampler.sample(logits[rows], [batch[i] for i in seeded]).token_ids
    sampled = [i for i, b in enumerate(batch) if verified_by_rejection(b.params)]
    if not sampled:
        return ids, None
    rows = to_device(sampled, logits.device, torch.int64)
    probs = _filtered_probs(logits[rows].float(), [batch[i].params for i in sampled])
    noise = torch.empty_like(probs).exponential_(generator=sampler.generator)
    ids[rows] = (probs / noise).argmax(dim=-1)  # the exponential race: a draw from probs
    q = torch.zeros(logits.shape, dtype=torch.float32, device=logits.device)
    q[rows] = probs
    return ids, q


@dataclass
class RejectionBatch:
    """Requests of a verifying step whose proposals came from q, as padded tensors (R requests, K proposals)."""

    target_rows: torch.Tensor
    """(R, K + 1) int64: row of the step's sampled rows for each position (padding repeats the last)."""
    num_draft: torch.Tensor
    """(R,) int64: each request's proposals k <= K."""
    draft_ids: torch.Tensor
    """(R, K) int64."""
    draft_probs: torch.Tensor
    """(R, K, vocab) float32: q at each proposal."""
    params: list[SamplingParams]


def rejection_tokens(target_probs: torch.Tensor, batch: RejectionBatch, generator: torch.Generator) -> torch.Tensor:
    """(R, K + 1) tokens for the rows (see the module docstring); `target_probs` (R, K + 1, vocab) is p.

    Row j < a: the proposal; row a < k: a residual draw; a == k: -1 (keep the row's own draw)."""
    R, K = batch.draft_ids.shape
    device = batch.draft_ids.device
    ids = batch.draft_ids
    p_d = target_probs[:, :K].gather(-1, ids[..., None])[..., 0]  # (R, K)
    q_d = batch.draft_probs.gather(-1, ids[..., None])[..., 0]
    uniform = torch.rand((R, K), generator=generator, device=device)
    valid = torch.arange(K, device=device)[None, :] < batch.num_draft[:, None]
    accept = (uniform * q_d < p_d) & valid  # u < p / q, without dividing by a q of 0
    num_accepted = accept.long().cumprod(dim=1).sum(dim=1)  # (R,)
    at = num_accepted.clamp(max=K - 1)
    p_at = target_probs[torch.arange(R, device=device), at]  # (R, vocab)
    residual = (p_at - batch.draft_probs[torch.arange(R, device=device), at]).clamp(min=0)
    empty = residual.sum(dim=-1, keepdim=True) <= 0  # p <= q nowhere: only float rounding gets here
    residual = torch.where(empty, p_at, residual)
    noise = torch.empty_like(residual).exponential_(generator=generator)
    recovered = (residual / noise).argmax(dim=-1)  # a draw from the normalized residual
    tokens = torch.full((R, K + 1), -1, dtype=torch.int64, device=device)
    tokens[:, :K] = torch.where(valid, ids, -1)
    rejected = num_accepted < batch.num_draft
    cols = torch.arange(K + 1, device=device)[None, :]
    tokens = torch.where(cols == num_accepted[:, None], torch.where(rejected, recovered, -1)[:, None], tokens)
    return torch.where(cols > num_accepted[:, None], -1, tokens)


def apply_rejection(
    token_ids: torch.Tensor, logits: torch.Tensor, batch: RejectionBatch, generator: torch.Generator
) -> torch.Tensor:
    """`token_ids` (the step's sampled rows) with the rows of `batch`'s requests rewritten (see the module docstring)."""
    R, K1 = batch.target_rows.shape
    row_params = [p for p in batch.params for _ in range(K1)]
    probs = _filtered_probs(logits[batch.target_rows.reshape(-1)].float(), row_params).view(R, K1, -1)
    tokens = rejection_tokens(probs, batch, generator)
    real = torch.arange(K1, device=tokens.device)[None, :] <= batch.num_draft[:, None]  # padding repeats a row
    rows, values = batch.target_rows[real], tokens[real]
    token_ids = token_ids.clone()
    token_ids[rows] = torch.where(values < 0, token_ids[rows], values)
    return token_ids
