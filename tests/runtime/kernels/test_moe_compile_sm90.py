"""The fused MoE GEMM (and its routing, alignment and sum over k) compiles for sm_90 (H100/H200) without a GPU, and loads weights in 16-byte pieces."""

from tests.runtime.kernels.sm90_script import run_sm90_script


def test_moe_gemm_compiles_for_sm90_with_vector_loads():
    stdout = run_sm90_script("moe_compile_sm90.py", timeout=600)
    lines = [line for line in stdout.splitlines() if "ptx chars" in line]
    assert len(lines) == 13, stdout  # twelve GEMMs (two with int64 block experts), the sum over k
    assert all(line.endswith(" vectorized") for line in lines), stdout
    assert "_align_kernel compiled" in stdout and "_align_count_kernel and _align_scatter_kernel compiled" in stdout
    assert "_softmax_topk_kernel compiled" in stdout and "_norm_route_kernel compiled" in stdout
    shared = [line for line in stdout.splitlines() if line.startswith("  shared")]
    assert len(shared) == 12 and all(line.endswith(" ok") for line in shared), stdout
