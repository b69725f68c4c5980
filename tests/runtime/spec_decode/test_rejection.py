"""Rejection sampling keeps the target's distribution exactly: checked on a small vocabulary.

Many independent trials run as one batch (one "request" per trial), with fixed seeds, so the test is
deterministic; each emitted token's frequencies are compared with the exact distribution p by total
variation, against a bound several standard errors wide (about 0.01 for 100k trials of 6 tokens).
"""

from __future__ import annotations

import torch

from model_optimizer.runtime.sampling_params import SamplingParams
from model_optimizer.runtime.spec_decode.rejection import RejectionBatch, rejection_tokens
from model_optimizer.runtime.spec_decode.verify import accepted_prefix

VOCAB, K, TRIALS = 6, 3, 100_000


def _distributions(seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    p = torch.rand(K + 1, VOCAB, generator=g) ** 3  # peaked, and different from q
    q = torch.rand(K, VOCAB, generator=g) ** 2
    q[0, 2] = 0.0  # a token q never proposes but p allows: only the residual can emit it
    return p / p.sum(-1, keepdim=True), q / q.sum(-1, keepdim=True)


def _emit(p: torch.Tensor, q: torch.Tensor, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Run TRIALS verifications; returns the emitted tokens (TRIALS, K + 1; -1 past the end) and their count."""
    g = torch.Generator().manual_seed(seed)
    drafts = torch.stack([torch.multinomial(q[j], TRIALS, replacement=True, generator=g) for j in range(K)], dim=1)
    bonus = torch.multinomial(p[K], TRIALS, replacement=True, generator=g)  # the target's own draw at the last row
    batch = RejectionBatch(
        target_rows=torch.zeros(TRIALS, K + 1, dtype=torch.int64),
        num_draft=torch.full((TRIALS,), K),
        draft_ids=drafts,
        draft_probs=q.expand(TRIALS, K, VOCAB),
        params=[SamplingParams(temperature=1.0)] * TRIALS,
    )
    tokens = rejection_tokens(p.expand(TRIALS, K + 1, VOCAB), batch, g)
    # the host's prefix rule (verify.accepted_prefix), vectorized: keep proposals while the row equals them
    rows = torch.where(tokens < 0, bonus[:, None], tokens)
    a = (rows[:, :K] == drafts).long().cumprod(dim=1).sum(dim=1)
    emitted = torch.where(torch.arange(K + 1)[None, :] <= a[:, None], rows, -1)
    return emitted, a + 1


def _tv(samples: torch.Tensor, p: torch.Tensor) -> float:
    freq = torch.bincount(samples, minlength=VOCAB).float() / len(samples)
    return 0.5 * (freq - p).abs().sum().item()


def test_each_emitted_token_follows_the_target_distribution():
    p, q = _distributions(0)
    emitted, counts = _emit(p, q, 1)
    for j in range(K + 1):
        reached = emitted[:, j] >= 0  # trials that emitted a token at position j
        assert reached.sum() > 5000, j
        assert _tv(emitted[reached, j], p[j]) < 0.015, j
    assert (emitted[:, 0] == 2).any()  # q never proposes token 2: it comes from the residual


def test_acceptance_rate_is_one_minus_total_variation():
    """The chance that the first proposal is kept is sum_x min(p(x), q(x))."""
    p, q = _distributions(3)
    _, counts = _emit(p, q, 4)
    expected = torch.minimum(p[0], q[0]).sum().item()
    assert abs((counts > 1).float().mean().item() - expected) < 0.01


def test_equal_distributions_accept_everything():
    p, _ = _distributions(5)
    _, counts = _emit(p, p[:K].clone(), 6)
    assert (counts == K + 1).float().mean().item() > 0.999


def test_point_mass_proposals_are_the_target_draw_rule():
    """With a proposal that is one token (n-gram), keeping it when the target's draw equals it accepts with
    probability p(token), and the emitted token is the target's draw: distributed as p by construction."""
    assert accepted_prefix([4, 1, 3], [4, 1, 2], None, None) == 2
    assert accepted_prefix([5, 1], [4], None, None) == 0
