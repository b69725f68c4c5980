"""The kernels compile for sm_90 (H100/H200) on a machine without a GPU, through Triton's own ptxas."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow  # compiles every kernel for sm_90 with ptxas


def test_kernels_compile_for_sm90():
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    env["PYTHONPATH"] = str(Path(__file__).resolve().parents[3])
    script = Path(__file__).with_name("compile_sm90.py")
    result = subprocess.run([sys.executable, str(script)], env=env, capture_output=True, text=True, timeout=300)
    if result.returncode == 3:
        pytest.skip(result.stdout.strip())
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stdout.count("ptx chars") == 10 + 12  # attention, cache, rotary, sampling (2); quantized matmul
    quant = [line for line in result.stdout.splitlines() if line.startswith("_quant_matmul_kernel")]
    # weights move in 16-byte pieces or async copies (the one-row GEMV's pipelined loop) in every shape
    assert len(quant) == 11 and all(line.endswith(" vectorized") for line in quant), result.stdout
    attention = [line for line in result.stdout.splitlines() if line.startswith("_paged_attention_kernel")]
    assert len(attention) == 4 and all(line.endswith(" vectorized") for line in attention), result.stdout
