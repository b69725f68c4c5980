"""The tiny checkpoints' weight spreading on the shapes real models can hold: empty and 0-dim parameters."""

from __future__ import annotations

import torch
from torch import nn

from tests.tiny_checkpoints import _spread_weights


class _OddShapes(nn.Module):
    """A weight, a norm scale, two empty tensors (either dimension zero) and a scalar multiplier."""

    def __init__(self) -> None:
        super().__init__()
        self.proj = nn.Parameter(torch.zeros(16, 64))
        self.norm = nn.Parameter(torch.zeros(64))
        self.no_columns = nn.Parameter(torch.zeros(4, 0))
        self.no_rows = nn.Parameter(torch.zeros(0, 8))
        self.scale = nn.Parameter(torch.tensor(0.5))


def test_empty_and_scalar_parameters_are_left_and_the_rest_spread():
    model = _OddShapes()
    _spread_weights(model, seed=3)
    assert model.no_columns.shape == (4, 0) and model.no_rows.shape == (0, 8)
    assert model.scale.item() == 0.5  # transformers' own starting value
    assert 0.5 < model.proj.std().item() * 64**0.5 < 2.0  # std 1/sqrt(64), not transformers' 0.02
    assert (model.norm - 1.0).abs().max().item() < 0.5 and model.norm.std().item() > 0.0


def test_same_seed_same_weights():
    first, second = _OddShapes(), _OddShapes()
    _spread_weights(first, seed=7)
    _spread_weights(second, seed=7)
    assert all(torch.equal(a, b) for a, b in zip(first.parameters(), second.parameters()))
