"""Pure-torch multi-head latent attention (MLA) over a paged latent cache: the CPU path and the yardstick
of the Triton kernel (kernels/mla_attention.py).

Cache layout (one tensor per layer): (1, num_blocks, block_size, 1, kv_lora_rank + qk_rope_head_dim).
Each token's row is its compressed KV (after kv_a_layernorm) then its rotated rope key, written once
and never up-projected in place. The 5-d shape is the paged cache's usual (planes, blocks, offsets,
heads, dim) with one plane and one "head", so slot arithmetic (block_id * block_size + offset), block
tables and the runner's slicing of blocks are the same as for full-head caches. A slot of -1 in
`slot_mapping` is a padding token and is skipped. An fp8 cache stores clamp(x / k_scale) in e4m3 and
reads it back times k_scale (kernels/reference.py).

Two equal ways to attend (the softmax scale applies to q.k = q_nope.k_nope + q_pe.k_pe):
- up-projected (`mla_attention_ref`, what transformers computes): each cached row's compressed KV
  times `kv_b_proj` gives every head's k_nope and v; keys are [k_nope | k_pe];
- absorbed (`latent_attention_ref`, what the GPU kernel computes): with W_UK and W_UV each head's
  rows of kv_b_proj, q_nope.k_nope = (q_nope W_UK).c, so a query [q_nope W_UK | q_pe] attends
  directly over the cached rows [c | k_pe], and the heads' outputs p.c times W_UV^T are p.v. One
  (kv_lora_rank + qk_rope_head_dim) row per token is read instead of heads x (keys + values).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from model_optimizer.runtime.kernels.formats import FP8_DTYPE
from model_optimizer.runtime.kernels.reference import _weighted_values, quantize_fp8


def check_latent_cache(cache: torch.Tensor, latent_dim: int) -> None:
    if cache.dim() != 5 or cache.shape[0] != 1 or cache.shape[3] != 1 or cache.shape[4] != latent_dim:
        raise ValueError(
            f"a latent cache must be (1, num_blocks, block_size, 1, {latent_dim}), got {tuple(cache.shape)}"
        )


def store_latent_ref(
    latent: torch.Tensor, cache: torch.Tensor, slot_mapping: torch.Tensor, scale: torch.Tensor | None = None
) -> None:
    """Write each token's row (num_tokens, latent_dim) into its cache slot; slot -1 writes nothing."""
    check_latent_cache(cache, latent.shape[1])
    flat = cache.view(-1, latent.shape[1])  # (num_blocks * block_size, latent_dim)
    keep = slot_mapping >= 0
    rows = latent[keep]
    flat[slot_mapping[keep].long()] = quantize_fp8(rows, scale) if cache.dtype == FP8_DTYPE else rows.to(cache.dtype)


def _sequence_rows(cache: torch.Tensor, block_table: torch.Tensor, seq_len: int, scale) -> torch.Tensor:
    """(seq_len, latent_dim) float32 rows of one sequence, dequantized when the cache is fp8."""
    block_size = cache.shape[2]
    blocks = block_table[: -(-seq_len // block_size)].long()
    rows = cache[0, blocks].flatten(0, 1)[:seq_len, 0].float()
    return rows * scale.float() if cache.dtype == FP8_DTYPE and scale is not None else rows


def _causal(q_len: int, seq_len: int, device: torch.device) -> torch.Tensor:
    """(q_len, seq_len) bool: the last q_len positions each see every key up to their own."""
    q_pos = torch.arange(seq_len - q_len, seq_len, device=device)[:, None]
    return torch.arange(seq_len, device=device)[None, :] <= q_pos


def latent_attention_ref(
    query: torch.Tensor,
    cache: torch.Tensor,
    query_start_loc: torch.Tensor,
    seq_lens: torch.Tensor,
    block_tables: torch.Tensor,
    scale: float,
    kv_lora_rank: int,
    k_scale: torch.Tensor | None = None,
) -> torch.Tensor:
    """Absorbed attention: query (num_tokens, heads, latent_dim) = [q_nope W_UK | q_pe] over the cached
    rows; returns (num_tokens, heads, kv_lora_rank), each head's softmax-weighted sum of compressed KVs,
    in the query dtype. Sequences as in `paged_attention_ref` (query_start_loc, seq_lens after this
    step, block_tables); a sequence with no new token is skipped."""
    check_latent_cache(cache, query.shape[2])
    out = query.new_zeros(query.shape[0], query.shape[1], kv_lora_rank)
    starts = query_start_loc.tolist()
    for i, seq_len in enumerate(seq_lens.tolist()):
        q = query[starts[i] : starts[i + 1]].float()  # (q_len, heads, latent_dim)
        if q.shape[0] == 0:
            continue
        rows = _sequence_rows(cache, block_tables[i], seq_len, k_scale)  # (seq_len, latent_dim)
        scores = torch.einsum("qhd,kd->hqk", q, rows) * scale  # (heads, q_len, seq_len)
        visible = _causal(q.shape[0], seq_len, query.device)
        probs = scores.masked_fill(~visible, float("-inf")).softmax(dim=-1)
        values = rows[:, None, :kv_lora_rank].expand(seq_len, q.shape[1], kv_lora_rank)
        out[starts[i] : starts[i + 1]] = _weighted_values(probs, values, visible).to(query.dtype)
    return out


def mla_attention_ref(
    q_nope: torch.Tensor,
    q_pe: torch.Tensor,
    cache: torch.Tensor,
    query_start_loc: torch.Tensor,
    seq_lens: torch.Tensor,
    block_tables: torch.Tensor,
    kv_b_weight: torch.Tensor,
    scale: float,
    k_scale: torch.Tensor | None = None,
) -> torch.Tensor:
    """Up-projected attention, transformers' arithmetic: q_nope (num_tokens, heads, qk_nope_head_dim),
    q_pe (num_tokens, heads, qk_rope_head_dim), kv_b_weight (heads * (qk_nope + v_head_dim), kv_lora_rank)
    (this rank's heads' rows) -> (num_tokens, heads, v_head_dim) in the query dtype."""
    num_heads, nope, rope = q_nope.shape[1], q_nope.shape[2], q_pe.shape[2]
    kv_lora_rank = kv_b_weight.shape[1]
    v_dim = kv_b_weight.shape[0] // num_heads - nope
    check_latent_cache(cache, kv_lora_rank + rope)
    out = q_nope.new_zeros(q_nope.shape[0], num_heads, v_dim)
    starts = query_start_loc.tolist()
    for i, seq_len in enumerate(seq_lens.tolist()):
        first, end = starts[i], starts[i + 1]
        if end == first:
            continue
        rows = _sequence_rows(cache, block_tables[i], seq_len, k_scale)
        kv = F.linear(rows[:, :kv_lora_rank], kv_b_weight.float()).view(seq_len, num_heads, nope + v_dim)
        k_nope, v = kv.split([nope, v_dim], dim=-1)  # (seq_len, heads, nope), (seq_len, heads, v_dim)
        k = torch.cat([k_nope, rows[:, None, kv_lora_rank:].expand(seq_len, num_heads, rope)], dim=-1)
        q = torch.cat([q_nope[first:end], q_pe[first:end]], dim=-1).float()  # (q_len, heads, nope + rope)
        scores = torch.einsum("qhd,khd->hqk", q, k) * scale
        visible = _causal(end - first, seq_len, q.device)
        probs = scores.masked_fill(~visible, float("-inf")).softmax(dim=-1)
        out[first:end] = _weighted_values(probs, v, visible).to(q_nope.dtype)
    return out
