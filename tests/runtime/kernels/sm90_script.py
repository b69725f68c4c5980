"""Run one of this folder's sm_90 compile scripts the way its test needs it: in a subprocess without
TRITON_INTERPRET (the scripts compile with Triton's own ptxas), the repository on PYTHONPATH."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

NO_AOT_API = 3
"""The scripts' exit status when this Triton has no usable ahead-of-time API: the test skips."""


def run_sm90_script(name: str, timeout: float) -> str:
    """The stdout of tests/runtime/kernels/NAME, run to success (else the test fails with its stderr)."""
    here = Path(__file__).resolve()
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    env["PYTHONPATH"] = str(here.parents[3])
    script = here.with_name(name)
    result = subprocess.run([sys.executable, str(script)], env=env, capture_output=True, text=True, timeout=timeout)
    if result.returncode == NO_AOT_API:
        pytest.skip(result.stdout.strip())
    assert result.returncode == 0, result.stderr[-3000:]
    return result.stdout
