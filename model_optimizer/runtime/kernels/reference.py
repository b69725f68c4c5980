"""Pure-torch reference for the paged KV cache: the CPU path and the yardstick for Triton kernels.

Cache layout (one tensor per layer): (2, num_blocks, block_size, num_kv_heads, head_dim),
index 0 holding keys and 1 values. Token t of a sequence lives in block
block_table[t // block_size] at offset t % block_size; its flat slot is block_id * block_size + offset.
A slot of -1 in `slot_mapping` means "no token" (padding of a CUDA-graph batch) and is skipped.

fp8 KV cache (`kv_cache.dtype == torch.float8_e4m3fn`): per-tensor float32 scales `k_scale` and
`v_scale` (scalar tensors, None meaning 1.0). Storing writes clamp(x / scale, -448, 448) rounded
to e4m3; attention reads cache * scale. Scales are ignored for caches of any other dtype.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from model_optimizer.runtime.kernels.formats import FP8_DTYPE, FP8_MAX


def quantize_fp8(x: torch.Tensor, scale: torch.Tensor | None) -> torch.Tensor:
    """x / scale, clamped to the e4m3 range (torch's cast does not saturate), as float8_e4m3fn."""
    x = x.float()
    if scale is not None:
        x = x / scale.float()
    return x.clamp(-FP8_MAX, FP8_MAX).to(FP8_DTYPE)


def _cache_plane(plane: torch.Tensor, scale: torch.Tensor | None) -> torch.Tensor:
    """One K or V plane as float32, dequantized when the cache is fp8."""
    if plane.dtype == FP8_DTYPE and scale is not None:
        return plane.float() * scale.float()
    return plane.float()


def store_kv_ref(
    key: torch.Tensor,
    value: torch.Tensor,
    kv_cache: torch.Tensor,
    slot_mapping: torch.Tensor,
    k_scale: torch.Tensor | None = None,
    v_scale: torch.Tensor | None = None,
) -> None:
    """Write new keys and values (num_tokens, num_kv_heads, head_dim) into their cache slots."""
    num_kv_heads, head_dim = key.shape[1:]
    flat = kv_cache.view(2, -1, num_kv_heads, head_dim)  # (2, num_blocks * block_size, kv_heads, head_dim)
    keep = slot_mapping >= 0  # -1: padding token, nothing to store
    slots = slot_mapping[keep].long()
    key, value = key[keep], value[keep]
    if kv_cache.dtype == FP8_DTYPE:
        flat[0, slots] = quantize_fp8(key, k_scale)
        flat[1, slots] = quantize_fp8(value, v_scale)
    else:
        flat[0, slots] = key.to(kv_cache.dtype)
        flat[1, slots] = value.to(kv_cache.dtype)


@dataclass
class KVStore:
    """Where a kernel that computes the new keys stores them, with their values: `store_kv`'s arguments but
    the key (kernels/rotary.py `norm_rotate_store` rotates K and writes it here in the same launch)."""

    value: torch.Tensor
    """(num_tokens, num_kv_heads, head_dim) new values, stored as they are (cast, or quantized for fp8)."""
    kv_cache: torch.Tensor
    """(2, num_blocks, block_size, num_kv_heads, head_dim) one layer's paged cache."""
    slot_mapping: torch.Tensor
    """(num_tokens,) cache slot of each token; -1 stores nothing (padding of a CUDA-graph batch)."""
    k_scale: torch.Tensor | None = None
    v_scale: torch.Tensor | None = None

    def store_ref(self, key: torch.Tensor) -> None:
        """`store_kv_ref` of `key` and these values: what the fused kernel must write."""
        store_kv_ref(key, self.value, self.kv_cache, self.slot_mapping, self.k_scale, self.v_scale)


def paged_attention_ref(
    query: torch.Tensor,
    kv_cache: torch.Tensor,
    query_start_loc: torch.Tensor,
    seq_lens: torch.Tensor,
    block_tables: torch.Tensor,
    scale: float,
    sliding_window: int | None = None,
    k_scale: torch.Tensor | None = None,
    v_scale: torch.Tensor | None = None,
    softcap: float | None = None,
    sinks: torch.Tensor | None = None,
) -> torch.Tensor:
    """Causal attention of each sequence's new tokens over its whole cached context.

    query: (num_tokens, num_heads, head_dim), the new tokens of all sequences, flattened.
    query_start_loc: (num_seqs + 1,) offsets of each sequence's tokens in `query`.
    seq_lens: (num_seqs,) context length after this step (cached tokens plus new ones).
    block_tables: (num_seqs, max_blocks) block ids of each sequence.
    A sliding window w lets a query at position p see keys at positions > p - w.
    k_scale / v_scale dequantize an fp8 cache (see the module docstring).
    softcap c (Gemma 2's attn_logit_softcapping) bounds each scaled score s to c * tanh(s / c) before
    the mask and the softmax; None leaves the scores as they are.
    sinks (num_heads,) (gpt-oss's attention sinks): head h's softmax has one more logit, sinks[h], in its
    denominator, whose weight is dropped (transformers' eager GptOss attention); None: no sink.
    Returns (num_tokens, num_heads, head_dim) in the query dtype.
    """
    block_size, num_kv_heads = kv_cache.shape[2], kv_cache.shape[3]
    num_heads = query.shape[1]
    group = num_heads // num_kv_heads
    out = torch.empty_like(query)
    starts = query_start_loc.tolist()
    for i, seq_len in enumerate(seq_lens.tolist()):
        q = query[starts[i] : starts[i + 1]]  # (q_len, heads, head_dim)
        q_len = q.shape[0]
        if q_len == 0:
            continue  # padded sequence slot
        num_blocks = -(-seq_len // block_size)
        blocks = block_tables[i, :num_blocks].long()
        kv = kv_cache[:, blocks].flatten(1, 2)[:, :seq_len]  # (2, seq_len, kv_heads, head_dim)
        k = _cache_plane(kv[0], k_scale).repeat_interleave(group, dim=1)
        v = _cache_plane(kv[1], v_scale).repeat_interleave(group, dim=1)
        scores = torch.einsum("qhd,khd->hqk", q.float(), k) * scale  # (heads, q_len, seq_len)
        if softcap is not None:
            scores = torch.tanh(scores / softcap) * softcap
        q_pos = torch.arange(seq_len - q_len, seq_len, device=query.device)[:, None]
        k_pos = torch.arange(seq_len, device=query.device)[None, :]
        visible = k_pos <= q_pos
        if sliding_window is not None:
            visible &= k_pos > q_pos - sliding_window
        scores.masked_fill_(~visible, float("-inf"))
        if sinks is not None:  # one more logit per head in the denominator, its weight dropped
            sink = sinks.float()[:, None, None].expand(-1, q_len, 1)
            probs = torch.cat([scores, sink], dim=-1).softmax(dim=-1)[..., :-1]
        else:
            probs = scores.softmax(dim=-1)
        out[starts[i] : starts[i + 1]] = _weighted_values(probs, v, visible).to(query.dtype)
    return out


def _weighted_values(probs: torch.Tensor, v: torch.Tensor, visible: torch.Tensor) -> torch.Tensor:
    """probs (heads, q_len, seq_len) @ v (seq_len, heads, head_dim) -> (q_len, heads, head_dim), where a
    key a query cannot see cannot change its result.

    A masked weight is an exact 0, but 0 * NaN is NaN: one NaN or inf value of a later token (a
    poisoned prompt chunk) would reach every earlier query of the chunk, and through the prefix
    cache a later clean request. So non-finite values are selected away (zeroed), and only the
    queries that do see one get NaN back.
    """
    finite = torch.isfinite(v)  # (seq_len, heads, head_dim)
    if bool(finite.all()):
        return torch.einsum("hqk,khd->qhd", probs, v)
    sees_bad = torch.einsum("qk,khd->qhd", visible.float(), (~finite).float()) > 0
    out = torch.einsum("hqk,khd->qhd", probs, v.masked_fill(~finite, 0.0))
    return out.masked_fill(sees_bad, float("nan"))
