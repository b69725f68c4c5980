"""benchmarks/linear_profile.py: the per-linear profile read from the committed tile table (no GPU)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch

BENCHMARKS = Path(__file__).resolve().parents[3] / "benchmarks"


@pytest.fixture(scope="module")
def linear_profile():
    sys.path.insert(0, str(BENCHMARKS))
    try:
        import linear_profile

        yield linear_profile
    finally:
        sys.path.remove(str(BENCHMARKS))


@pytest.mark.parametrize("method", ["bf16", "fp8", "int8", "int4"])
def test_bytes_are_those_of_the_layers_tensors(linear_profile, method):
    from model_optimizer.runtime.kernels.quant_reference import repack_int4
    from model_optimizer.runtime.layers.quantization.quantizers import quantize_fp8, quantize_int4, quantize_int8

    n, k = 256, 512
    w = torch.randn(n, k).bfloat16()
    if method == "bf16":
        tensors = (w,)
    elif method == "fp8":
        tensors = quantize_fp8(w).astuple()
    elif method == "int8":
        tensors = quantize_int8(w).astuple()
    else:
        q, scales, zeros = quantize_int4(w, 128).astuple()
        tensors = (repack_int4(q, "sequential", "planes"), scales, zeros)
    assert linear_profile.weight_bytes(method, n, k) == sum(t.numel() * t.element_size() for t in tensors)


def test_the_engine_s_table_format_per_method_and_rows(linear_profile):
    assert [linear_profile.table_format("fp8", m) for m in (1, 16, 17, 256)] == ["fp8", "fp8", "fp8a", "fp8a"]
    assert [linear_profile.table_format("int8-w8a8", m) for m in (16, 64)] == ["int8", "int8a"]
    assert [linear_profile.table_format(m, 64) for m in ("int8", "int4", "bf16")] == ["int8", "int4", "bf16"]


def test_profile_of_a_table_and_its_missing_entries(tmp_path):
    out = tmp_path / "profile.json"
    table = {
        "gpu": "test",
        "entries": {
            "int4:1:6144:4096": {"block_m": 16, "block_n": 128, "block_k": 128, "split_k": 6},
            "int4:1:4096:4096": {"block_m": 16, "block_n": 64, "block_k": 128, "split_k": 9},
            "int4:1:28672:4096": {"block_m": 16, "block_n": 128, "block_k": 128, "split_k": 2},
            "int4:1:4096:14336": {"block_m": 1, "block_n": 64, "block_k": 256, "split_k": 8},
        },
        "us": {"int4:1:6144:4096": 10.0, "int4:1:4096:4096": 8.0, "int4:1:28672:4096": 30.0, "int4:1:4096:14336": 20.0},
    }
    (tmp_path / "table.json").write_text(json.dumps(table))
    subprocess.run(
        [sys.executable, str(BENCHMARKS / "linear_profile.py"), "--table", str(tmp_path / "table.json")]
        + ["--rows", "1", "64", "--methods", "int4", "--output", str(out)],
        check=True,
        capture_output=True,
    )
    one, sixty_four = json.loads(out.read_text())["results"]
    assert [r["linear"] for r in one["linears"]] == ["qkv_proj", "o_proj", "gate_up_proj", "down_proj"]
    assert [r["launch"] for r in one["linears"]] == [
        "mma 128x16 split 6",
        "mma 64x16 split 9",
        "mma 128x16 split 2",
        "gemv 64x1 split 8",
    ]
    assert one["layer_us"] == 68.0 and one["step_linears_ms"] == round(68.0 * 32 / 1e3, 3)  # Llama-3.1-8B: 32 layers
    gate_up = one["linears"][2]
    assert gate_up["mb"] == round((28672 * 4096 // 2 + 28672 * 32 * 3 + 2 * (28672 + 4096)) / 1e6, 2)
    assert sixty_four["missing"] == [
        f"int4:64:{n}:{k}" for n, k in ((6144, 4096), (4096, 4096), (28672, 4096), (4096, 14336))
    ]
    assert "layer_us" not in sixty_four
