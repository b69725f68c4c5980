"""Token embedding and the LM head, which may share the embedding's weight."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from model_optimizer.layers.linear import default_weight_loader


class VocabEmbedding(nn.Module):
    def __init__(self, vocab_size: int, hidden_size: int) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.empty(vocab_size, hidden_size))
        self.weight.weight_loader = default_weight_loader  # type: ignore[attr-defined]

    def forward(self, token_ids: torch.Tensor) -> torch.Tensor:
        return F.embedding(token_ids, self.weight)


class LMHead(VocabEmbedding):
    def forward(self, hidden: torch.Tensor) -> torch.Tensor:  # type: ignore[override]
        return F.linear(hidden, self.weight)
