"""Attention over a packed batch of whole sequences (no KV cache): the encoder's and the decoder embedder's.

A packed batch is the tokens of several sequences laid end to end, described by `cu_seqlens`
(num_seqs + 1 offsets). Scores are q.k * head_dim ** -0.5 (a layer with another scale, Gemma's, scales
q to match first). Three paths compute the same thing:

- `varlen_attention_ref`: one plain softmax per sequence in float32; the yardstick.
- flash varlen (FlashAttention-2 through `torch.ops.aten._flash_attention_forward`) on CUDA in
  fp16/bf16: truly padding-free, GQA without copies.
- padded SDPA: the batch's sequences scattered into (num_seqs, max_len) with a key mask. The
  embedder packs each chunk of inputs longest first, and runs of similar lengths are padded
  separately, so the padding here is small; when every sequence has the same length there is no
  mask and no padding at all.

Soft-capped scores (Gemma 2's c * tanh(s / c)) have no fused path: neither SDPA nor flash varlen caps
them, so `_capped_attention` computes them explicitly, in float32, per sequence and in chunks of queries.
"""

from __future__ import annotations

import functools
import logging
from dataclasses import dataclass, field

import numpy as np
import torch
import torch.nn.functional as F

from model_optimizer.runtime.device import to_device

log = logging.getLogger(__name__)


@dataclass
class VarlenMeta:
    """Shape of one packed batch, shared by every layer of a forward pass."""

    cu_seqlens: torch.Tensor
    """(num_seqs + 1,) int32 offsets of each sequence in the flat token dimension, on the model's device."""
    lengths: list[int]
    """Length of each sequence (host copy, so no layer needs a device sync to read it)."""
    _padding: dict = field(default_factory=dict, repr=False, compare=False)
    """Padded-layout indices per run of sequences, built by the first layer and reused by the others."""
    graphable: bool = field(default=True, compare=False)
    """False once a layer attended on a path that loops over `lengths` on the host (capped scores): a CUDA
    graph of that forward would replay the lengths it was captured with (embed/cuda_graphs.py)."""

    @functools.cached_property
    def max_len(self) -> int:
        return max(self.lengths)  # read by every layer: computed once per forward

    def attend(
        self,
        q: torch.Tensor,
        k: torch.Tensor,
        v: torch.Tensor,
        causal: bool,
        window: int | None = None,
        softcap: float | None = None,
    ) -> torch.Tensor:
        """Attention of each sequence over itself; `softcap` c caps each scaled score s to c * tanh(s / c)
        before the mask."""
        return varlen_attention(q, k, v, self, causal, window, softcap)

    @classmethod
    def from_lengths(cls, lengths: list[int], device: torch.device) -> VarlenMeta:
        offsets = [0]
        for n in lengths:
            offsets.append(offsets[-1] + n)
        return cls(torch.tensor(offsets, dtype=torch.int32, device=device), list(lengths))


@dataclass
class PaddedMeta:
    """A padded (batch, seq) layout flattened to batch * seq tokens: the exported ONNX graph's, where
    shapes must stay symbolic. Padding may be on either side (Qwen3-Embedding's tokenizer pads left):
    a left-padded causal pad query sees no key, and scaled_dot_product_attention gives such a row zeros,
    in torch and in the exported graph alike. Same `attend` contract as VarlenMeta."""

    batch: int | torch.Tensor
    seq: int | torch.Tensor
    attention_mask: torch.Tensor
    """(batch, seq) 1 for real tokens, 0 for padding."""

    def attend(
        self,
        q: torch.Tensor,
        k: torch.Tensor,
        v: torch.Tensor,
        causal: bool,
        window: int | None = None,
        softcap: float | None = None,
    ) -> torch.Tensor:
        if softcap is not None:
            raise ValueError("attention logit soft-capping is not supported in the padded (export) layout")
        if window is not None:
            raise ValueError("sliding-window attention is not supported in the padded (export) layout")
        heads, kv_heads, head_dim = q.shape[1], k.shape[1], q.shape[2]
        qp = q.reshape(self.batch, self.seq, heads, head_dim).transpose(1, 2)
        kp, vp = (t.reshape(self.batch, self.seq, kv_heads, head_dim).transpose(1, 2) for t in (k, v))
        if kv_heads != heads:  # spelled out: the exporter has no enable_gqa
            kp, vp = kp.repeat_interleave(heads // kv_heads, dim=1), vp.repeat_interleave(heads // kv_heads, dim=1)
        mask = self.attention_mask.bool()[:, None, None, :]  # (batch, 1, 1, seq): keys that exist
        if causal:
            pos = torch.arange(self.seq, device=q.device)
            mask = mask & (pos[None, :] <= pos[:, None])
        out = F.scaled_dot_product_attention(qp, kp, vp, attn_mask=mask)  # (batch, heads, seq, head_dim)
        return out.transpose(1, 2).reshape(-1, heads, head_dim)


def varlen_attention_ref(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    meta: VarlenMeta,
    causal: bool,
    window: int | None = None,
    softcap: float | None = None,
) -> torch.Tensor:
    """q (tokens, heads, head_dim), k and v (tokens, kv_heads, head_dim) -> (tokens, heads, head_dim)."""
    group = q.shape[1] // k.shape[1]
    out = torch.empty_like(q)
    start = 0
    for n in meta.lengths:
        qs, ks, vs = (t[start : start + n].float() for t in (q, k, v))
        ks, vs = ks.repeat_interleave(group, dim=1), vs.repeat_interleave(group, dim=1)
        scores = torch.einsum("qhd,khd->hqk", qs, ks) * q.shape[-1] ** -0.5  # (heads, n, n)
        if softcap is not None:
            scores = softcap * torch.tanh(scores / softcap)
        visible = _visible(n, causal, window, q.device)
        if visible is not None:
            scores = scores.masked_fill(~visible, float("-inf"))
        out[start : start + n] = torch.einsum("hqk,khd->qhd", scores.softmax(-1), vs).to(q.dtype)
        start += n
    return out


def varlen_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    meta: VarlenMeta,
    causal: bool,
    window: int | None = None,
    softcap: float | None = None,
) -> torch.Tensor:
    """Same contract as `varlen_attention_ref`, on the fastest path available for these tensors."""
    if window is not None and window >= meta.max_len:
        window = None  # the window covers every sequence: plain (causal) attention
    if softcap is not None:
        return _capped_attention(q, k, v, meta, causal, window, softcap)
    if q.is_cuda and q.dtype in (torch.float16, torch.bfloat16) and _flash_varlen_ok():
        try:
            return _flash_varlen(q, k, v, meta, causal, window)
        except torch.OutOfMemoryError:
            raise
        except (
            RuntimeError,
            TypeError,
            ValueError,
            ImportError,
            AttributeError,
        ) as exc:  # unsupported head size, old torch ...
            _disable_flash_varlen(exc)
    if len(meta.lengths) == 1 or min(meta.lengths) == meta.max_len:
        return _padded_sdpa(q, k, v, meta, causal, window)
    if "groups" not in meta._padding:
        meta._padding["groups"] = _similar_length_groups(meta.lengths)
    out = torch.empty_like(q)
    for start, end, lengths in meta._padding["groups"]:
        sub = VarlenMeta(meta.cu_seqlens, lengths, meta._padding.setdefault(start, {}))  # reads `lengths` only
        out[start:end] = _padded_sdpa(q[start:end], k[start:end], v[start:end], sub, causal, window)
    return out


def _similar_length_groups(lengths: list[int], slack: float = 1.15) -> list[tuple[int, int, list[int]]]:
    """Runs of neighbouring sequences whose padding to their longest costs at most `slack` x their tokens.

    The embedder packs sequences longest first, so runs are long and the padding small.
    Returns (first token, end token, lengths) per run."""
    groups = []
    first, token = 0, 0
    while first < len(lengths):
        last, longest, num_tokens = first + 1, lengths[first], lengths[first]
        while last < len(lengths):
            longer = max(longest, lengths[last])
            if longer * (last - first + 1) > slack * (num_tokens + lengths[last]):
                break
            longest, num_tokens, last = longer, num_tokens + lengths[last], last + 1
        groups.append((token, token + num_tokens, lengths[first:last]))
        first, token = last, token + num_tokens
    return groups


def _visible(
    n: int,
    causal: bool,
    window: int | None,
    device: torch.device,
    queries: range | None = None,
    keys: range | None = None,
) -> torch.Tensor | None:
    """(queries, keys) bool, positions in a sequence of n (all n unless given): which keys each query may
    see; None when it sees all of them."""
    if not causal and window is None:
        return None
    queries = range(n) if queries is None else queries
    keys = range(n) if keys is None else keys
    rows = torch.arange(queries.start, queries.stop, device=device)[:, None]
    cols = torch.arange(keys.start, keys.stop, device=device)[None, :]
    visible = torch.ones(len(queries), len(keys), dtype=torch.bool, device=device)
    if causal:
        visible &= cols <= rows
    if window is not None:
        visible &= cols > rows - window
    return visible


SCORES_BYTES = 256 << 20
"""The most float32 scores `_capped_attention` holds at once (one chunk of queries of one sequence)."""


def _capped_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    meta: VarlenMeta,
    causal: bool,
    window: int | None,
    softcap: float,
    budget: int = SCORES_BYTES,
) -> torch.Tensor:
    """Explicit-score attention with each scaled score s capped to softcap * tanh(s / softcap) before the
    mask. Per sequence, a chunk of queries at a time so that a long one holds at most `budget` bytes of
    scores; each chunk reads only the keys its mask can leave visible (up to its last query when causal,
    from its first query's window on). GQA by grouping query heads, not by copying K and V."""
    meta.graphable = False
    heads, kv_heads, head_dim = q.shape[1], k.shape[1], q.shape[2]
    scale = head_dim**-0.5
    out = torch.empty_like(q)
    start = 0
    for n in meta.lengths:
        rows = max(1, budget // (4 * heads * max(n, 1)))  # a CUDA graph's warm-up passes empty sequences
        for first in range(0, n, rows):
            queries = range(first, min(first + rows, n))
            low = max(0, first - window + 1) if window is not None else 0
            keys = range(low, queries.stop if causal else n)
            qs = q[start + queries.start : start + queries.stop].float().view(len(queries), kv_heads, -1, head_dim)
            ks, vs = (t[start + keys.start : start + keys.stop].float() for t in (k, v))
            scores = torch.einsum("qhgd,khd->hgqk", qs, ks).mul_(scale / softcap).tanh_().mul_(softcap)
            visible = _visible(n, causal, window, q.device, queries, keys)
            if visible is not None:
                scores.masked_fill_(~visible, float("-inf"))
            attended = torch.einsum("hgqk,khd->qhgd", scores.softmax(-1), vs)
            out[start + queries.start : start + queries.stop] = attended.reshape(len(queries), heads, head_dim)
        start += n
    return out


def _padded_sdpa(q, k, v, meta: VarlenMeta, causal: bool, window: int | None) -> torch.Tensor:
    num_seqs, max_len = len(meta.lengths), meta.max_len
    group = q.shape[1] // k.shape[1]
    if min(meta.lengths) == max_len and window is None:
        # equal lengths: a plain reshape, no padding and no mask
        qp, kp, vp = (t.view(num_seqs, max_len, t.shape[1], t.shape[2]).transpose(1, 2) for t in (q, k, v))
        out = F.scaled_dot_product_attention(qp, kp, vp, is_causal=causal, enable_gqa=group > 1)
        return out.transpose(1, 2).reshape(q.shape)
    if "valid" not in meta._padding:
        meta._padding["valid"], meta._padding["rows"] = _padding_index(meta.lengths, q.device)
    valid, rows = meta._padding["valid"], meta._padding["rows"]
    qp, kp, vp = (_pad(t, rows, num_seqs, max_len) for t in (q, k, v))  # (num_seqs, heads, max_len, head_dim)
    mask = valid[:, None, None, :]  # (num_seqs, 1, 1, max_len): keys that exist
    visible = _visible(max_len, causal, window, q.device)
    if visible is not None:
        mask = mask & visible
    out = F.scaled_dot_product_attention(qp, kp, vp, attn_mask=mask, enable_gqa=group > 1)
    return (
        out.transpose(1, 2).reshape(num_seqs * max_len, *q.shape[1:]).index_select(0, rows)
    )  # (tokens, heads, head_dim)


def _padding_index(lengths: list[int], device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    """valid (num_seqs, max_len) bool, True where a token exists, and rows (tokens,) int64, the padded
    row of each token. Built on the host and copied without a stream sync (a `nonzero` on the GPU would sync)."""
    lens = np.asarray(lengths, dtype=np.int64)
    valid = np.arange(int(lens.max()), dtype=np.int64)[None, :] < lens[:, None]
    rows = np.flatnonzero(valid).astype(np.int64)
    return to_device(torch.from_numpy(valid), device), to_device(torch.from_numpy(rows), device)


def _pad(t: torch.Tensor, rows: torch.Tensor, num_seqs: int, max_len: int) -> torch.Tensor:
    padded = t.new_zeros(num_seqs * max_len, t.shape[1], t.shape[2]).index_copy_(0, rows, t)
    return padded.view(num_seqs, max_len, t.shape[1], t.shape[2]).transpose(1, 2)


_FLASH = {"ok": True}


def _flash_varlen_ok() -> bool:
    return _FLASH["ok"]


def _disable_flash_varlen(exc: Exception) -> None:
    log.warning("flash varlen attention unavailable (%s); using padded SDPA", exc)
    _FLASH["ok"] = False


def _flash_varlen(q, k, v, meta: VarlenMeta, causal: bool, window: int | None) -> torch.Tensor:
    """FlashAttention-2's varlen kernel, called as the aten op that `torch.nn.attention.varlen` wraps.

    Direct, because the kernel already does what the wrapper withholds on torch 2.11: fewer K/V heads
    than query heads (GQA) and rows with a stride (v is a slice of the fused qkv projection), so no
    `repeat_interleave` of K/V and no `.contiguous()` copy, and no custom-op dispatch of the wrapper's on
    the host (what those cost: README "Embeddings", "How it runs" > Attention)."""
    if q.shape[1] % k.shape[1]:
        raise ValueError(f"{q.shape[1]} query heads are not a multiple of {k.shape[1]} key/value heads")
    left, right = (window - 1 if window else -1), (0 if causal else -1)
    cu = meta.cu_seqlens
    out = torch.ops.aten._flash_attention_forward(
        q,
        k,
        v,
        cu,
        cu,
        meta.max_len,
        meta.max_len,
        0.0,
        left == -1 and right == 0,  # is_causal: plain causal; a causal window is told by right == 0
        False,  # return_debug_mask
        window_size_left=left,
        window_size_right=right,
    )
    return out[0]
