"""Random batches over a paged latent cache (multi-head latent attention) for the kernel tests, CPU and GPU."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from model_optimizer.runtime.kernels.reference import quantize_fp8


@dataclass
class LatentBatch:
    query: torch.Tensor  # (num_tokens, heads, kv_lora + rope)
    cache: torch.Tensor  # (1, num_blocks, block_size, 1, kv_lora + rope)
    query_start_loc: torch.Tensor
    seq_lens: torch.Tensor
    block_tables: torch.Tensor
    max_query_len: int
    max_seq_len: int
    kv_lora_rank: int
    k_scale: torch.Tensor | None = None


def make_batch(
    seqs, num_heads, kv_lora, rope, block_size, dtype=torch.float32, fp8=False, seed=0, device="cpu"
) -> LatentBatch:
    """Random queries and rows (spare blocks too), blocks shuffled across sequences; `seqs` as in
    paged_batches.py, (cached tokens, new tokens) per sequence."""
    gen = torch.Generator().manual_seed(seed)
    seq_lens = [cached + q_len for cached, q_len in seqs]
    blocks = [-(-n // block_size) for n in seq_lens]
    num_blocks = sum(blocks) + 3
    order = torch.randperm(num_blocks, generator=gen).to(torch.int32)
    tables = torch.full((len(seqs), max(blocks)), -1, dtype=torch.int32)
    used = 0
    for i, n in enumerate(blocks):
        tables[i, :n] = order[used : used + n]
        used += n
    num_tokens = sum(q for _, q in seqs)
    query = torch.randn(num_tokens, num_heads, kv_lora + rope, generator=gen).to(dtype)
    cache = torch.randn(1, num_blocks, block_size, 1, kv_lora + rope, generator=gen)
    k_scale = None
    if fp8:
        k_scale = (cache.abs().amax() / 448.0).reshape(())
        cache = quantize_fp8(cache, k_scale)
    q_lens = torch.tensor([0] + [q for _, q in seqs]).cumsum(0).to(torch.int32)
    return LatentBatch(
        query.to(device),
        (cache if fp8 else cache.to(dtype)).to(device),
        q_lens.to(device),
        torch.tensor(seq_lens, dtype=torch.int32, device=device),
        tables.to(device),
        max(q for _, q in seqs),
        max(seq_lens),
        kv_lora,
        None if k_scale is None else k_scale.float().to(device),
    )
