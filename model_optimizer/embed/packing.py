"""Lay one batch of token-id lists end to end and ship it to the device in one copy.

Everything the forward pass and the pooling need about a batch (token ids, positions, sequence
offsets, the output rows) is built on the host with numpy and held in one int64 buffer. On CUDA
that buffer is pinned and copied with `non_blocking=True`: a copy from pageable memory, or a
`torch.tensor(..., device="cuda")`, waits for every kernel already queued, which would stall the
host between batches and between layers.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass

import numpy as np
import torch

from model_optimizer.embed.varlen_attention import VarlenMeta


@dataclass
class PackedBatch:
    token_ids: torch.Tensor
    """(num_tokens,) int64 on the device: the sequences laid end to end."""
    positions: torch.Tensor
    """(num_tokens,) int64 on the device: 0, 1, ... within each sequence."""
    cu_seqlens: torch.Tensor
    """(num_seqs + 1,) int64 on the device: where each sequence starts; the last entry is num_tokens."""
    rows: torch.Tensor
    """(num_seqs,) int64 on the device: the output row (input index) of each sequence."""
    meta: VarlenMeta
    """Attention metadata (int32 offsets on the device, lengths on the host)."""


def pack_batch(token_ids: list[list[int]], rows: list[int], device: torch.device) -> PackedBatch:
    """One packed batch of `token_ids` (non-empty lists), destined for output `rows`."""
    lengths = [len(t) for t in token_ids]
    num_tokens, num_seqs = sum(lengths), len(token_ids)
    # segment starts in int64 elements, each 16-byte aligned: Triton specializes kernels on pointer
    # alignment, so a misaligned positions slice (odd num_tokens) would compile new kernel variants
    pos_at = _aligned(num_tokens)
    cu_at = pos_at + _aligned(num_tokens)
    rows_at = cu_at + _aligned(num_seqs + 1)
    host = torch.zeros(rows_at + num_seqs, dtype=torch.int64, pin_memory=device.type == "cuda")
    buf = host.numpy()  # shares memory with `host`
    lens = np.asarray(lengths, dtype=np.int64)
    cu = buf[cu_at : cu_at + num_seqs + 1]
    np.cumsum(lens, out=cu[1:])
    buf[:num_tokens] = np.fromiter(itertools.chain.from_iterable(token_ids), dtype=np.int64, count=num_tokens)
    buf[pos_at : pos_at + num_tokens] = np.arange(num_tokens, dtype=np.int64) - np.repeat(cu[:-1], lens)
    buf[rows_at:] = rows
    # one host -> device copy; on CUDA non-blocking from pinned memory (the caching host allocator
    # keeps the pinned block alive until the copy has run)
    dev = host.to(device, non_blocking=True) if device.type == "cuda" else host
    dev_cu = dev[cu_at : cu_at + num_seqs + 1]
    return PackedBatch(
        token_ids=dev[:num_tokens],
        positions=dev[pos_at : pos_at + num_tokens],
        cu_seqlens=dev_cu,
        rows=dev[rows_at:],
        meta=VarlenMeta(dev_cu.to(torch.int32), lengths),
    )


def _aligned(num: int) -> int:
    """`num` int64 elements rounded up to a multiple of 16 bytes."""
    return (num + 1) // 2 * 2
