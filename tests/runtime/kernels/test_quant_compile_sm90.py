"""The default launch shapes of the quantized matmul compile for sm_90 within its shared memory, without a GPU."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow  # compiles the quantized matmul tiles for sm_90 with ptxas


def test_default_quant_tiles_compile_for_sm90():
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    env["PYTHONPATH"] = str(Path(__file__).resolve().parents[3])
    script = Path(__file__).with_name("quant_compile_sm90.py")
    result = subprocess.run([sys.executable, str(script)], env=env, capture_output=True, text=True, timeout=900)
    if result.returncode == 3:
        pytest.skip(result.stdout.strip())
    assert result.returncode == 0, result.stderr[-3000:]
    lines = [line for line in result.stdout.splitlines() if line.startswith("quant ")]
    assert len(lines) >= 12 and all(line.endswith(" ok") for line in lines), result.stdout
