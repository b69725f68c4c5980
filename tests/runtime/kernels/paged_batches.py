"""Random paged-attention batches for the kernel tests (shared by the CPU and GPU suites).

A batch is described per sequence by (num_cached, q_len): tokens already in the cache and new
tokens of this step; a decode token is (context, 1), a fresh prompt chunk (0, n).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from model_optimizer.runtime.kernels.reference import FP8_DTYPE, paged_attention_ref, quantize_fp8


@dataclass
class PagedBatch:
    """Inputs of one attention call plus the slots its new tokens were written to."""

    query: torch.Tensor  # (num_tokens, num_heads, head_dim)
    kv_cache: torch.Tensor  # (2, num_blocks, block_size, num_kv_heads, head_dim)
    query_start_loc: torch.Tensor  # (num_seqs + 1,) int32
    seq_lens: torch.Tensor  # (num_seqs,) int32
    block_tables: torch.Tensor  # (num_seqs, max_blocks) int32, -1 past each sequence's blocks
    slot_mapping: torch.Tensor  # (num_tokens,) int64 slots of the new tokens
    max_query_len: int
    max_seq_len: int
    k_scale: torch.Tensor | None = None
    v_scale: torch.Tensor | None = None


def make_paged_batch(
    seqs: list[tuple[int, int]],
    num_heads: int,
    num_kv_heads: int,
    head_dim: int,
    block_size: int,
    dtype: torch.dtype = torch.float32,
    device: str | torch.device = "cpu",
    kv_dtype: torch.dtype | None = None,
    seed: int = 0,
) -> PagedBatch:
    """Random query and cache (never zeros) with shuffled, non-contiguous blocks per sequence.

    kv_dtype=torch.float8_e4m3fn quantizes the cache with per-tensor scales (amax / 448).
    Spare blocks hold random values too, so reading a wrong block shows up as a wrong result.
    """
    gen = torch.Generator().manual_seed(seed)
    seq_lens = [cached + q_len for cached, q_len in seqs]
    blocks_per_seq = [-(-n // block_size) for n in seq_lens]
    max_blocks = max(1, max(blocks_per_seq, default=1))
    num_blocks = sum(blocks_per_seq) + 3  # a few spare blocks never referenced
    order = torch.randperm(num_blocks, generator=gen).to(torch.int32)
    block_tables = torch.full((len(seqs), max_blocks), -1, dtype=torch.int32)
    slots, used = [], 0
    for i, ((cached, q_len), n) in enumerate(zip(seqs, blocks_per_seq)):
        block_tables[i, :n] = order[used : used + n]
        used += n
        pos = torch.arange(cached, cached + q_len)
        slots.append(block_tables[i, pos // block_size].long() * block_size + pos % block_size)
    num_tokens = sum(q_len for _, q_len in seqs)
    # values drawn where they live: a GPU case can hold gigabytes of cache
    data_gen = gen if torch.device(device).type == "cpu" else torch.Generator(device=device).manual_seed(seed)
    query = torch.randn(num_tokens, num_heads, head_dim, generator=data_gen, device=device)
    cache = torch.randn(2, num_blocks, block_size, num_kv_heads, head_dim, generator=data_gen, device=device)
    k_scale = v_scale = None
    if kv_dtype == FP8_DTYPE:
        k_scale = (cache[0].abs().amax() / 448.0).reshape(())
        v_scale = (cache[1].abs().amax() / 448.0).reshape(())
        cache = torch.stack([quantize_fp8(cache[0], k_scale), quantize_fp8(cache[1], v_scale)])
    else:
        cache = cache.to(dtype)
    q_lens = torch.tensor([0] + [q_len for _, q_len in seqs])
    return PagedBatch(
        query=query.to(dtype).to(device),
        kv_cache=cache.to(device),
        query_start_loc=q_lens.cumsum(0).to(torch.int32).to(device),
        seq_lens=torch.tensor(seq_lens, dtype=torch.int32).to(device),
        block_tables=block_tables.to(device),
        slot_mapping=(torch.cat(slots) if slots else torch.zeros(0, dtype=torch.long)).to(device),
        max_query_len=max((q_len for _, q_len in seqs), default=0),
        max_seq_len=max(seq_lens, default=0),
        k_scale=None if k_scale is None else k_scale.float().to(device),
        v_scale=None if v_scale is None else v_scale.float().to(device),
    )


def relative_error(actual: torch.Tensor, expected: torch.Tensor) -> float:
    """||actual - expected|| / ||expected|| in float64 (NaN if actual holds NaN)."""
    diff = (actual.double() - expected.double()).norm()
    return (diff / expected.double().norm().clamp_min(1e-30)).item()


def batch_reference(batch: PagedBatch, sliding_window: int | None = None, **options) -> torch.Tensor:
    """paged_attention_ref on `batch` at head_dim ** -0.5 (`options`: softcap, sinks)."""
    args = (batch.query, batch.kv_cache, batch.query_start_loc, batch.seq_lens, batch.block_tables)
    scale = batch.query.shape[-1] ** -0.5
    return paged_attention_ref(*args, scale, sliding_window, k_scale=batch.k_scale, v_scale=batch.v_scale, **options)


def batch_kernel(batch: PagedBatch, sliding_window: int | None = None, **options) -> torch.Tensor:
    """The Triton paged_attention on `batch` at head_dim ** -0.5, into a NaN-filled output (a row it skips
    shows); `options`: num_splits, max_query_len, tiles, softcap, sinks."""
    from model_optimizer.runtime.kernels.paged_attention import paged_attention

    options.setdefault("max_query_len", batch.max_query_len)
    out = torch.full_like(batch.query, float("nan"))
    args = (batch.query, batch.kv_cache, batch.query_start_loc, batch.seq_lens, batch.block_tables)
    scale = batch.query.shape[-1] ** -0.5
    paged_attention(
        *args, scale, sliding_window, max_seq_len=batch.max_seq_len, k_scale=batch.k_scale, v_scale=batch.v_scale,
        out=out, **options,
    )  # fmt: skip
    return out
