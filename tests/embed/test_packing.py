"""pack_batch: the one host buffer a batch travels in; and the padded attention's per-forward index cache."""

from __future__ import annotations

import torch

from model_optimizer.embed import varlen_attention as va
from model_optimizer.embed.packing import pack_batch


def test_pack_batch_lays_sequences_end_to_end():
    seqs = [[5, 6, 7], [8], [9, 10]]
    packed = pack_batch(seqs, [4, 0, 2], torch.device("cpu"))
    assert packed.token_ids.tolist() == [5, 6, 7, 8, 9, 10]
    assert packed.positions.tolist() == [0, 1, 2, 0, 0, 1]
    assert packed.cu_seqlens.tolist() == [0, 3, 4, 6]
    assert packed.rows.tolist() == [4, 0, 2]
    assert packed.meta.cu_seqlens.dtype == torch.int32 and packed.meta.cu_seqlens.tolist() == [0, 3, 4, 6]
    assert packed.meta.lengths == [3, 1, 2]
    assert packed.token_ids.dtype == packed.positions.dtype == torch.int64


def test_padded_attention_builds_its_indices_once_per_forward():
    gen = torch.Generator().manual_seed(0)
    lengths = [40, 9, 8, 3]  # unequal: the padded fallback, in more than one run of similar lengths
    n = sum(lengths)
    q, k, v = (torch.randn(n, 2, 8, generator=gen) for _ in range(3))
    meta = va.VarlenMeta.from_lengths(lengths, q.device)
    first = va.varlen_attention(q, k, v, meta, causal=True)
    groups = meta._padding["groups"]
    assert len(groups) > 1
    cached = {key: dict(val) for key, val in meta._padding.items() if key != "groups" and "rows" in val}
    assert cached  # at least one run of unequal lengths went through the padded layout
    again = va.varlen_attention(q, k, v, meta, causal=True)  # the next layer: same meta, cached indices
    assert torch.equal(first, again)
    assert all(meta._padding[key]["rows"] is cached[key]["rows"] for key in cached)
    expected = va.varlen_attention_ref(q, k, v, meta, causal=True)
    assert (first - expected).abs().max() < 1e-5
