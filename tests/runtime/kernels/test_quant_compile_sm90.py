"""The default launch shapes of the quantized matmul compile for sm_90 within its shared memory, without a GPU."""

import pytest

from tests.runtime.kernels.sm90_script import run_sm90_script

pytestmark = pytest.mark.slow  # compiles the quantized matmul tiles for sm_90 with ptxas


def test_default_quant_tiles_compile_for_sm90():
    stdout = run_sm90_script("quant_compile_sm90.py", timeout=900)
    lines = [line for line in stdout.splitlines() if line.startswith("quant ")]
    assert len(lines) >= 12 and all(line.endswith(" ok") for line in lines), stdout
