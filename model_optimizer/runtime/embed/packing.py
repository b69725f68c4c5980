"""Lay one batch of token-id lists end to end and ship it to the device in one copy.

Everything the forward pass and the pooling need about a batch (token ids, positions, sequence
offsets, the output rows) is built on the host with numpy and goes over in one copy that does not
wait for the GPU (model_optimizer/runtime/device.py): a copy from pageable memory, or a
`torch.tensor(..., device="cuda")`, waits for every kernel already queued, which would stall the
host between batches and between layers.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass

import numpy as np
import torch

from model_optimizer.runtime.device import to_device_packed
from model_optimizer.runtime.embed.varlen_attention import VarlenMeta


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
    skip: torch.Tensor | None = None
    """(num_seqs,) int64 on the device: leading tokens of each sequence that pooling leaves out (an
    instruction, for a model whose Pooling config says include_prompt false); None: none anywhere."""
    pooled: torch.Tensor | None = None
    """(num_tokens,) bool on the device, with `skip`: the tokens pooling reads."""


def pack_batch(
    token_ids: list[list[int]], rows: list[int], device: torch.device, skip: list[int] | None = None
) -> PackedBatch:
    """One packed batch of `token_ids` (non-empty lists), destined for output `rows`; `skip`: how many
    leading tokens of each sequence pooling leaves out (each fewer than the sequence's length)."""
    lengths = [len(t) for t in token_ids]
    num_tokens, num_seqs = sum(lengths), len(token_ids)
    lens = np.asarray(lengths, dtype=np.int64)
    cu = np.zeros(num_seqs + 1, dtype=np.int64)
    np.cumsum(lens, out=cu[1:])
    flat = np.fromiter(itertools.chain.from_iterable(token_ids), dtype=np.int64, count=num_tokens)
    positions = np.arange(num_tokens, dtype=np.int64) - np.repeat(cu[:-1], lens)
    arrays = [flat, positions, cu, rows]
    if skip is not None and any(skip):
        skips = np.asarray(skip, dtype=np.int64)
        arrays += [skips, positions >= np.repeat(skips, lens)]
    dev_ids, dev_positions, dev_cu, dev_rows, *dev_skip = to_device_packed(arrays, np.int64, device)
    return PackedBatch(
        token_ids=dev_ids,
        positions=dev_positions,
        cu_seqlens=dev_cu,
        rows=dev_rows,
        meta=VarlenMeta(dev_cu.to(torch.int32), lengths),
        skip=dev_skip[0] if dev_skip else None,
        pooled=dev_skip[1].bool() if dev_skip else None,
    )
