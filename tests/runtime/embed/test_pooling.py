"""Pooling over a packed batch against the obvious per-sequence computation."""

from __future__ import annotations

import itertools

import pytest
import torch
import torch.nn.functional as F

from model_optimizer.runtime.embed.pooling import finish, pool

PER_SEQUENCE = {
    "mean": lambda p: p.mean(0),
    "max": lambda p: p.max(0).values,
    "cls": lambda p: p[0],
    "last": lambda p: p[-1],
    "mean_sqrt_len": lambda p: p.sum(0) / len(p) ** 0.5,
}


@pytest.mark.parametrize("mode", list(PER_SEQUENCE))
def test_pool_matches_per_sequence(mode):
    lengths = [3, 1, 7, 2]
    hidden = torch.randn(sum(lengths), 8, generator=torch.Generator().manual_seed(0)).to(torch.bfloat16)
    parts = hidden.float().split(lengths)
    expected = torch.stack([PER_SEQUENCE[mode](p) for p in parts])
    got = pool(hidden, torch.tensor([0, *itertools.accumulate(lengths)]), mode)
    assert got.dtype == torch.float32 and torch.allclose(got, expected, atol=1e-6)


def test_unknown_pooling_and_finish():
    with pytest.raises(ValueError, match="pooling 'median' is not supported"):
        pool(torch.zeros(2, 4), torch.tensor([0, 2]), "median")
    x = torch.tensor([[3.0, 4.0, 12.0]])
    assert torch.allclose(finish(x, True, 2), torch.tensor([[0.6, 0.8]]))
    assert torch.equal(finish(x, False, None), x)
    assert torch.allclose(finish(x, True, None), F.normalize(x, dim=-1))
