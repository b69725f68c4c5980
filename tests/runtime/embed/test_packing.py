"""pack_batch: the one host buffer a batch travels in; and the padded attention's per-forward index cache."""

from __future__ import annotations

import torch

from model_optimizer.runtime.embed import varlen_attention as va
from model_optimizer.runtime.embed.packing import pack_batch


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


def test_graph_buckets_cover_the_batch():
    from model_optimizer.runtime.embed.cuda_graphs import bucket, graph_key

    assert [bucket(n) for n in (1, 2, 3, 16, 17)] == [1, 2, 4, 16, 32]
    assert bucket(3, 16) == 16
    key = graph_key([16] * 64, 4096)
    assert (key.num_tokens, key.num_seqs, key.max_len) == (1024, 64, 16)
    key = graph_key([300, 5, 1], 4096)
    assert (key.num_tokens, key.num_seqs, key.max_len) == (512, 4, 512)
    assert graph_key([1], 4096).num_tokens == 16
    assert graph_key([3000, 2000], 4096) is None


def test_cuda_graph_setting_is_checked_and_off_on_the_cpu(qwen3_dir):
    import pytest

    from model_optimizer.runtime.embed import EmbedConfig, Embedder

    with pytest.raises(ValueError, match="cuda_graph_max_tokens"):
        EmbedConfig(cuda_graph_max_tokens=-1)
    emb = Embedder(qwen3_dir, device="cpu", dtype="float32", cuda_graph_max_tokens=4096)
    assert emb.graphs is None
    assert emb.encode(["a text", "another one"]).embeddings.shape == (2, emb.hidden_size)


def test_every_segment_starts_16_byte_aligned():
    packed = pack_batch([[1, 2, 3], [4, 5]], [1, 0], torch.device("cpu"))  # 5 tokens, 2 sequences: odd sizes
    for t in (packed.token_ids, packed.positions, packed.cu_seqlens, packed.rows):
        assert (t.storage_offset() * t.element_size()) % 16 == 0
    assert packed.positions.tolist() == [0, 1, 2, 0, 1] and packed.cu_seqlens.tolist() == [0, 3, 5]
