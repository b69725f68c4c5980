"""Whole-sequence forward passes outside the serving loop: calibration and perplexity need every
position's hidden state, which the engine (built to sample one token per step) does not return.

Runs the engine's own model and attention path on a flat batch of sequences, each prefilled at once
into a scratch paged KV cache.
"""

from __future__ import annotations

import torch
from torch import nn

from model_optimizer.runtime.layers.attention import AttentionMetadata, kv_cache_shape

BLOCK_SIZE = 16


def prefill_inputs(
    windows: list[list[int]], model: nn.Module, device: torch.device, kv_dtype: torch.dtype
) -> tuple[torch.Tensor, torch.Tensor, AttentionMetadata]:
    """(token_ids, positions, metadata) for prefilling all windows as separate sequences."""
    args = model.args
    lengths = [len(w) for w in windows]
    blocks = [-(-n // BLOCK_SIZE) for n in lengths]
    table = torch.zeros(len(windows), max(blocks), dtype=torch.int32)
    slots, start = [], 0
    for i, (n, b) in enumerate(zip(lengths, blocks)):
        table[i, :b] = torch.arange(start, start + b, dtype=torch.int32)
        slots.append(torch.arange(n) + start * BLOCK_SIZE)
        start += b
    shape = kv_cache_shape(model, start, BLOCK_SIZE)
    caches = [torch.zeros(shape, dtype=kv_dtype, device=device) for _ in range(args.num_layers)]
    meta = AttentionMetadata(
        slot_mapping=torch.cat(slots).to(device),
        query_start_loc=torch.tensor([0, *torch.tensor(lengths).cumsum(0).tolist()], dtype=torch.int32, device=device),
        seq_lens=torch.tensor(lengths, dtype=torch.int32, device=device),
        block_tables=table.to(device),
        max_query_len=max(lengths),
        max_seq_len=max(lengths),
        kv_caches=caches,
    )
    token_ids = torch.tensor([t for w in windows for t in w], dtype=torch.int64, device=device)
    positions = torch.cat([torch.arange(n) for n in lengths]).to(device)
    return token_ids, positions, meta


@torch.inference_mode()
def window_logits(model: nn.Module, window: list[int], device: torch.device) -> torch.Tensor:
    """(len(window), vocab) float32 logits of every position of one sequence."""
    dtype = next(model.parameters()).dtype
    token_ids, positions, meta = prefill_inputs([window], model, device, dtype)
    return model.compute_logits(model(token_ids, positions, meta)).float()
