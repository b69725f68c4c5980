"""With programmatic dependent launch on (kernels/pdl.py), every kernel a decode step launches that way
compiles for sm_90 with one wait and one release, reads and writes no memory the kernel before it may
still be writing or reading before that wait, and the one-row GEMV has its first weight tile in flight
before it; with PDL off the instructions are not there."""

import pytest

from tests.runtime.kernels.sm90_script import run_sm90_script

pytestmark = pytest.mark.slow  # compiles ten kernels for sm_90 with ptxas


def test_pdl_kernels_wait_before_any_dependent_access():
    stdout = run_sm90_script("pdl_compile_sm90.py", timeout=300)
    lines = dict(line.split(": ", 1) for line in stdout.splitlines() if ": waits" in line)
    assert len(lines) == 10, stdout
    for name in ("rms_norm", "silu_and_mul", "rotate_store", "attention", "reduce_splits", "gemv_int4", "tile_fp8"):
        assert lines[name] == "waits 1 releases 1 before wait []", (name, stdout)
    # the weights are read-only: their first tile is loaded before the wait, nothing is stored before it
    assert lines["gemv_bf16"] == "waits 1 releases 1 before wait [ld.global]", stdout
    assert lines["gemv_bf16_gated"] == lines["gemv_bf16"], stdout  # with SiLU-and-mul in its epilogue
    assert lines["gemv_bf16_off"].startswith("waits 0 releases 0"), stdout
