"""Pool the hidden states of a packed batch into one vector per sequence, then normalize / truncate."""

from __future__ import annotations

import torch
import torch.nn.functional as F


def pool(hidden: torch.Tensor, lengths: list[int], mode: str) -> torch.Tensor:
    """hidden (tokens, hidden) of sequences laid end to end -> (num_seqs, hidden) in float32."""
    device = hidden.device
    lens = torch.tensor(lengths, device=device)
    ends = torch.cumsum(lens, 0)
    starts = ends - lens
    if mode == "cls":
        return hidden[starts].float()
    if mode == "last":
        return hidden[ends - 1].float()
    seq_ids = torch.repeat_interleave(torch.arange(len(lengths), device=device), lens)  # (tokens,)
    h = hidden.float()
    if mode == "max":
        out = torch.full((len(lengths), h.shape[1]), float("-inf"), device=device)
        return out.scatter_reduce(0, seq_ids[:, None].expand_as(h), h, reduce="amax")
    sums = torch.zeros(len(lengths), h.shape[1], device=device).index_add_(0, seq_ids, h)
    if mode == "mean":
        return sums / lens[:, None].float()
    if mode == "mean_sqrt_len":
        return sums / lens[:, None].float().sqrt()
    raise ValueError(f"pooling {mode!r} is not supported; supported: mean, cls, last, max, mean_sqrt_len")


def finish(embeddings: torch.Tensor, normalize: bool, dimensions: int | None) -> torch.Tensor:
    """Matryoshka truncation to `dimensions` first, then L2 normalization (so the short vector is unit)."""
    if dimensions is not None:
        embeddings = embeddings[:, :dimensions]
    if normalize:
        embeddings = F.normalize(embeddings, p=2, dim=-1)
    return embeddings
