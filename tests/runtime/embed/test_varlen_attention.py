"""The packed attention's fast paths, and its soft-capped path, against the per-sequence reference."""

from __future__ import annotations

import pytest
import torch

from model_optimizer.runtime.embed.varlen_attention import (
    PaddedMeta,
    VarlenMeta,
    _capped_attention,
    _similar_length_groups,
    varlen_attention,
    varlen_attention_ref,
)


@pytest.mark.parametrize("lengths", [[5, 5, 5], [9, 7, 3, 1], [1], [40, 2, 39, 17, 17, 16]])
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("kv_heads", [4, 2, 1])
def test_matches_reference(lengths, causal, kv_heads):
    gen = torch.Generator().manual_seed(sum(lengths) + kv_heads)
    n = sum(lengths)
    q = torch.randn(n, 4, 16, generator=gen)
    k, v = torch.randn(n, kv_heads, 16, generator=gen), torch.randn(n, kv_heads, 16, generator=gen)
    meta = VarlenMeta.from_lengths(lengths, q.device)
    expected = varlen_attention_ref(q, k, v, meta, causal)
    assert torch.allclose(varlen_attention(q, k, v, meta, causal), expected, atol=1e-5)


def test_sliding_window_matches_reference():
    gen = torch.Generator().manual_seed(0)
    lengths = [12, 6, 3]
    q, k, v = (torch.randn(21, 2, 8, generator=gen) for _ in range(3))
    meta = VarlenMeta.from_lengths(lengths, q.device)
    expected = varlen_attention_ref(q, k, v, meta, True, window=4)
    assert torch.allclose(varlen_attention(q, k, v, meta, True, window=4), expected, atol=1e-5)
    assert not torch.allclose(expected, varlen_attention_ref(q, k, v, meta, True), atol=1e-3)


def test_groups_cover_every_token_once_with_little_padding():
    lengths = [100, 98, 97, 50, 49, 10, 9, 9, 1]
    groups = _similar_length_groups(lengths)
    assert [g[2] for g in groups] == [[100, 98, 97], [50, 49], [10, 9, 9], [1]]
    assert all(max(g[2]) * len(g[2]) <= 1.15 * sum(g[2]) for g in groups)
    assert groups[0][0] == 0 and groups[-1][1] == sum(lengths)
    assert all(a[1] == b[0] for a, b in zip(groups, groups[1:]))


def _capped_directly(q, k, v, lengths, causal, window, cap):
    """Soft-capped attention written out: whole score matrices, K/V heads repeated, mask from comparisons."""
    group, out, start = q.shape[1] // k.shape[1], [], 0
    for n in lengths:
        qs = q[start : start + n]
        ks, vs = (t[start : start + n].repeat_interleave(group, dim=1) for t in (k, v))
        scores = torch.einsum("qhd,khd->hqk", qs, ks) / q.shape[-1] ** 0.5
        scores = cap * torch.tanh(scores / cap)
        i, j = torch.arange(n)[:, None], torch.arange(n)[None, :]
        hidden = (j > i) if causal else torch.zeros(n, n, dtype=torch.bool)
        if window is not None:
            hidden = hidden | (j <= i - window)
        out.append(torch.einsum("hqk,khd->qhd", scores.masked_fill(hidden, float("-inf")).softmax(-1), vs))
        start += n
    return torch.cat(out)


@pytest.mark.parametrize("causal", [True, False])
@pytest.mark.parametrize("window", [None, 4])
@pytest.mark.parametrize("kv_heads", [4, 2, 1])
def test_capped_scores_in_chunks_match_a_direct_computation(causal, window, kv_heads):
    """Chunks of 3 queries over a 17-token sequence: every chunk's slice of keys and mask lines up."""
    gen = torch.Generator().manual_seed(kv_heads + (window or 0))
    lengths = [17, 5, 1]
    n = sum(lengths)
    q = 3 * torch.randn(n, 4, 16, generator=gen)  # scores well past the cap
    k, v = torch.randn(n, kv_heads, 16, generator=gen), torch.randn(n, kv_heads, 16, generator=gen)
    meta = VarlenMeta.from_lengths(lengths, q.device)
    expected = _capped_directly(q, k, v, lengths, causal, window, cap=2.0)
    chunked = _capped_attention(q, k, v, meta, causal, window, 2.0, budget=4 * 4 * 17 * 3)  # 3 queries a chunk
    assert torch.allclose(chunked, expected, atol=1e-5)
    assert torch.allclose(varlen_attention(q, k, v, meta, causal, window, softcap=2.0), expected, atol=1e-5)
    assert torch.allclose(varlen_attention_ref(q, k, v, meta, causal, window, softcap=2.0), expected, atol=1e-5)
    assert not torch.allclose(expected, varlen_attention_ref(q, k, v, meta, causal, window), atol=1e-2)


def test_capped_scores_keep_the_input_dtype_and_mark_the_batch_ungraphable():
    """The host loop over lengths cannot be replayed by a CUDA graph with other lengths: the meta says so."""
    gen = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(9, 2, 8, generator=gen).to(torch.bfloat16) for _ in range(3))
    meta = VarlenMeta.from_lengths([6, 3], q.device)
    varlen_attention(q, k, v, meta, True)
    assert meta.graphable
    out = varlen_attention(q, k, v, meta, True, softcap=5.0)
    expected = _capped_directly(q.float(), k.float(), v.float(), [6, 3], True, None, 5.0)
    assert out.dtype == torch.bfloat16 and torch.allclose(out.float(), expected, atol=2e-2)
    assert not meta.graphable


def test_the_padded_export_layout_refuses_capped_scores():
    q = torch.zeros(4, 2, 8)
    meta = PaddedMeta(1, 4, torch.ones(1, 4, dtype=torch.int64))
    with pytest.raises(ValueError, match="soft-capping is not supported in the padded"):
        meta.attend(q, q, q, causal=True, softcap=50.0)
