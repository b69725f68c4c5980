"""Pool the hidden states of a packed batch into one vector per sequence, then normalize / truncate."""

from __future__ import annotations

import torch
import torch.nn.functional as F


def pool(
    hidden: torch.Tensor,
    cu_seqlens: torch.Tensor,
    mode: str,
    skip: torch.Tensor | None = None,
    pooled: torch.Tensor | None = None,
) -> torch.Tensor:
    """hidden (tokens, hidden) of sequences laid end to end -> (num_seqs, hidden) in float32.

    `cu_seqlens` (num_seqs + 1,) int64 offsets of the sequences, on hidden's device (a host list
    would need a host -> device copy, which on CUDA waits for the forward pass).
    `skip` (num_seqs,) int64 and `pooled` (tokens,) bool, both or neither: leading tokens of each sequence
    left out, as sentence-transformers' Pooling(include_prompt=False) leaves out the prompt's tokens (it
    zeroes them in the attention mask that pooling reads): mean and max read the other tokens, cls takes
    the first token after them, last is unchanged. Each sequence keeps at least one token."""
    starts, ends = cu_seqlens[:-1], cu_seqlens[1:]
    lens = ends - starts
    # the skipped tokens are masked (0 for sums, -inf for max), not indexed away: indexing by a mask
    # would read the mask back to the host, which on CUDA waits for the forward pass
    counts = lens if skip is None else lens - skip
    if mode == "cls":
        return hidden[starts if skip is None else starts + skip].float()
    if mode == "last":
        return hidden[ends - 1].float()
    h = hidden.float()
    if mode == "max":
        if pooled is not None:
            h = h.masked_fill(~pooled[:, None], float("-inf"))
        return torch.segment_reduce(h, "max", lengths=lens, axis=0, unsafe=True)
    if pooled is not None:
        h = h * pooled[:, None]
    sums = torch.segment_reduce(
        h, "sum", lengths=lens, axis=0, unsafe=True
    )  # unsafe: no checks that read lengths back (a sync); (num_seqs, hidden); far faster than index_add_ on CPU
    if mode == "mean":
        return sums / counts[:, None].float()
    if mode == "mean_sqrt_len":
        return sums / counts[:, None].float().sqrt()
    raise ValueError(f"pooling {mode!r} is not supported; supported: mean, cls, last, max, mean_sqrt_len")


def finish(embeddings: torch.Tensor, normalize: bool, dimensions: int | None) -> torch.Tensor:
    """Matryoshka truncation to `dimensions` first, then L2 normalization (so the short vector is unit)."""
    if dimensions is not None:
        embeddings = embeddings[:, :dimensions]
    if normalize:
        embeddings = F.normalize(embeddings, p=2, dim=-1)
    return embeddings
