"""The latent attention kernel compiles for sm_90 (H100/H200) without a GPU, within shared memory, with
16-byte loads."""

from tests.runtime.kernels.sm90_script import run_sm90_script


def test_latent_attention_compiles_for_sm90():
    stdout = run_sm90_script("mla_compile_sm90.py", timeout=600)
    lines = [line for line in stdout.splitlines() if "ptx chars" in line]
    assert len(lines) == 8, stdout
    assert all(line.endswith(" vectorized") for line in lines), stdout
    shared = [line for line in stdout.splitlines() if line.startswith("  shared")]
    assert len(shared) == 6 and all(line.endswith(" ok") for line in shared), stdout
