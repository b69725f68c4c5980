"""Token embedding and the LM head, which may share the embedding's weight.

Vocab-parallel under tensor parallelism: the vocabulary is padded to a multiple of the number of
ranks and each rank keeps one equal block of rows (padding rows stay zero). The embedding looks up
the ids that fall in its block, zeroes the others, and one all_reduce adds the ranks' rows (each id
belongs to exactly one rank). The LM head computes its block of the logits and all_gather joins the
blocks in rank order, padding trimmed. Both split the same way, so tied weights share the shard.
On one device the block is the whole vocabulary: same shapes, same numbers as a plain embedding.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from model_optimizer.runtime.distributed import all_gather, all_reduce, get_tp
from model_optimizer.runtime.layers.lazy_tensor import LazyTensor, materialize, reads_lazily


class VocabEmbedding(nn.Module):
    def __init__(self, vocab_size: int, hidden_size: int) -> None:
        super().__init__()
        tp = get_tp()
        self.vocab_size = vocab_size
        self.num_local_rows = -(-vocab_size // tp.size)
        """Rows this rank holds: ceil(vocab_size / tp), the last rank's tail being padding."""
        self.vocab_start = tp.rank * self.num_local_rows
        """First token id of this rank's block."""
        self.num_real_rows = max(0, min(self.num_local_rows, vocab_size - self.vocab_start))
        """Rows of the block that are real tokens (the rest is padding)."""
        self.weight = nn.Parameter(torch.empty(self.num_local_rows, hidden_size))
        self.weight.weight_loader = self._load_rows  # type: ignore[attr-defined]

    @reads_lazily
    def _load_rows(self, param: nn.Parameter, loaded: torch.Tensor | LazyTensor, shard_id: str | None = None) -> None:
        expected = (self.vocab_size, param.shape[1])
        if tuple(loaded.shape) != expected:
            raise ValueError(f"expected shape {expected}, got {tuple(loaded.shape)}")
        rows = loaded.narrow(0, self.vocab_start, self.num_real_rows)
        param.data.narrow(0, 0, self.num_real_rows).copy_(materialize(rows, param.dtype))
        param.data[self.num_real_rows :].zero_()

    def forward(self, token_ids: torch.Tensor) -> torch.Tensor:
        if get_tp().size == 1:
            return F.embedding(token_ids, self.weight)
        local = token_ids - self.vocab_start
        outside = (local < 0) | (local >= self.num_real_rows)
        rows = F.embedding(local.masked_fill(outside, 0), self.weight)  # (tokens, hidden)
        return all_reduce(rows.masked_fill(outside.unsqueeze(-1), 0.0))


class LMHead(VocabEmbedding):
    def forward(self, hidden: torch.Tensor) -> torch.Tensor:  # type: ignore[override]
        logits = F.linear(hidden, self.weight)  # (rows, this rank's vocabulary block)
        if get_tp().size == 1:
            return logits
        return all_gather(logits, dim=-1)[..., : self.vocab_size]
