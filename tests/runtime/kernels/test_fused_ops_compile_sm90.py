"""The fused element-wise kernels compile for sm_90 (H100/H200) without a GPU, and load and store
rows in 16-byte pieces (v4 loads) rather than element by element."""

import pytest

from tests.runtime.kernels.sm90_script import run_sm90_script

pytestmark = pytest.mark.slow  # compiles the fused kernels for sm_90 with ptxas


def test_fused_ops_compile_sm90_with_vector_loads():
    stdout = run_sm90_script("fused_ops_compile_sm90.py", timeout=300)
    lines = [line for line in stdout.splitlines() if "ptx chars" in line]
    assert len(lines) == 9, stdout
    assert all(line.endswith(" vectorized") for line in lines), stdout
