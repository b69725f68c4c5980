"""The kernels compile for sm_90 (H100/H200) on a machine without a GPU, through Triton's own ptxas."""

import pytest

from tests.runtime.kernels.sm90_script import run_sm90_script

pytestmark = pytest.mark.slow  # compiles every kernel for sm_90 with ptxas


def test_kernels_compile_for_sm90():
    stdout = run_sm90_script("compile_sm90.py", timeout=300)
    # attention, cache, rotary, rotary + KV store (2), sampling (2); quantized matmul (13 shapes, the
    # fp8 and int8 row quantizers)
    assert stdout.count("ptx chars") == 12 + 14
    assert stdout.count("_norm_rotate_store_kernel") == 2, stdout
    quant = [line for line in stdout.splitlines() if line.startswith("_quant_matmul_kernel")]
    # weights move in 16-byte pieces or async copies (the one-row GEMV's pipelined loop) in every shape
    assert len(quant) == 12 and all(line.endswith(" vectorized") for line in quant), stdout
    attention = [line for line in stdout.splitlines() if line.startswith("_paged_attention_kernel")]
    assert len(attention) == 4 and all(line.endswith(" vectorized") for line in attention), stdout
