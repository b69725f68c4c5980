"""Quantized MiniLM folders served on a CUDA GPU: the quant kernels (and the embedder's CUDA graphs) give
the vectors the CPU reference path gives for the same folder.

Skipped without CUDA. Run on the GPU machine:
    PYTHONPATH=. python3 -m pytest -q tests/embed/test_quantized_encoder_gpu.py
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from model_optimizer.cli.main import main
from tests.embed.texts import varied_texts

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")]


def _quantize(minilm_dir: Path, method: str, out: Path) -> Path:
    args = ["quantize", str(minilm_dir), "--method", method, "--output", str(out), "--min-cosine", "0"]
    assert main([*args, "--num-eval-samples", "8", "--device", "cpu"]) == 0
    return out


@pytest.mark.parametrize("dtype", ["auto", "bfloat16"])
@pytest.mark.parametrize("method", ["int8", "fp8", "rtn-int4"])
def test_gpu_kernels_match_the_cpu_reference_on_the_folder(method, dtype, minilm_dir, tmp_path):
    from model_optimizer.embed import Embedder
    from model_optimizer.quant.attach import quantized_layers

    folder = _quantize(minilm_dir, method, tmp_path / method)
    texts = varied_texts(64)
    gpu = Embedder(folder, device="cuda", dtype=dtype)
    assert len(quantized_layers(gpu.backbone.model)) == 24
    assert all(m.qweight.is_cuda for _, m in quantized_layers(gpu.backbone.model))
    cpu = Embedder(folder, device="cpu", dtype="float32")
    got = gpu.encode(texts).embeddings
    want = cpu.encode(texts).embeddings
    cos = torch.nn.functional.cosine_similarity(got.double(), want.double(), dim=1)
    assert cos.min() > 0.999, cos.min()
    assert (gpu.encode(texts).embeddings - got).abs().max() < 1e-4  # replays (CUDA graphs) agree
