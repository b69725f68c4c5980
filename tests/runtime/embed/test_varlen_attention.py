"""The packed attention's fast paths against the per-sequence reference."""

from __future__ import annotations

import pytest
import torch

from model_optimizer.runtime.embed.varlen_attention import (
    VarlenMeta,
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
