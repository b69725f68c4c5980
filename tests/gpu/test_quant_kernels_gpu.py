"""Quantized linear kernels on CUDA at Qwen3-0.6B's and Llama-3.1-8B's linear shapes, against the
float32 product with the dequantized weight, and inside CUDA graphs.

Bounds on ||out - ref|| / ||ref|| (bf16 output, float32 accumulation): weight-only paths 1e-2 (a
bf16 rounding of the output is ~4e-3). fp8 above 16 rows runs W8A8 (`torch._scaled_mm` on
per-token fp8 activations): 1e-2 against the reference that quantizes the activations the same
way, 6e-2 against the weight-only product (e4m3's 3 mantissa bits on Gaussian activations: ~3%).
"""

import pytest
import torch

from model_optimizer.runtime.kernels import quant_reference as ref
from model_optimizer.runtime.layers.quantization.quantizers import quantize_fp8, quantize_int4, quantize_int8
from tests.runtime.kernels.paged_batches import relative_error

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU"),
]

SHAPES = {  # (N, K) of qkv, o, gate_up, down
    "qwen3-0.6b": [(4096, 1024), (1024, 2048), (6144, 1024), (1024, 3072)],
    "llama-3.1-8b": [(6144, 4096), (4096, 4096), (28672, 4096), (4096, 14336)],
}
CASES = [(model, n, k) for model, shapes in SHAPES.items() for n, k in shapes]
TOLERANCE = 1e-2
W8A8_VS_WEIGHT_ONLY = 6e-2
_weights: dict = {}


def _has_fp8() -> bool:
    return torch.cuda.get_device_capability() >= (8, 9)


def _weight(kind: str, n: int, k: int):
    """(qweight, scales, zeros, float32 dequantized weight), made once per shape and format."""
    key = (kind, n, k)
    if key not in _weights:
        _weights.clear()  # one at a time: Llama's gate_up in float32 alone is 470 MB
        w = torch.randn(n, k, device="cuda", generator=torch.Generator("cuda").manual_seed(n * 7 + k))
        if kind == "int8":
            q, s = quantize_int8(w).astuple()
            _weights[key] = (q, s, None, ref.dequantize_int8(q, s))
        elif kind == "fp8":
            q, s = quantize_fp8(w).astuple()
            _weights[key] = (q, s, None, ref.dequantize_fp8(q, s))
        else:
            q, s, z = quantize_int4(w.bfloat16(), 128).astuple()
            _weights[key] = (q, s, z, ref.dequantize_int4(q, s, z, 128, torch.float32))
    return _weights[key]


def _linear(kind, x, q, s, z, bias=None):
    from model_optimizer.runtime.kernels.quant_linear import fp8_linear, w4a16_linear, w8a16_linear

    if kind == "int8":
        return w8a16_linear(x, q, s, bias)
    if kind == "fp8":
        return fp8_linear(x, q, s, bias)
    return w4a16_linear(x, q, s, z, 128, bias)


def _fp8_backend(x, n: int) -> str:
    """Which fp8 path runs above 16 rows: W8A8 `_scaled_mm` or the weight-only Triton program (tile table)."""
    from model_optimizer.runtime.kernels.quant_matmul import device_tiles

    return device_tiles(x, n, "fp8", 0, fp8_scaled_mm=True).backend


@pytest.mark.parametrize("kind", ["int8", "int4", "fp8"])
@pytest.mark.parametrize(("model", "n", "k"), CASES)
def test_real_shapes_match_dequantized_weight(kind, model, n, k):
    if kind == "fp8" and not _has_fp8():
        pytest.skip("fp8 kernels need sm_89+")
    q, s, z, w = _weight(kind, n, k)
    for m in (1, 8, 64, 512):
        x = torch.randn(m, k, device="cuda", generator=torch.Generator("cuda").manual_seed(m)).bfloat16()
        out = _linear(kind, x, q, s, z)
        assert out.shape == (m, n) and out.dtype == torch.bfloat16
        weight_only = x.float() @ w.T
        if kind == "fp8" and m > 16 and _fp8_backend(x, n) == "scaled_mm":
            assert relative_error(out, ref.fp8_w8a8_linear_ref(x, q, s)) < TOLERANCE, (m, "vs W8A8 reference")
            assert relative_error(out, weight_only) < W8A8_VS_WEIGHT_ONLY, (m, "vs weight-only")
        else:
            assert relative_error(out, weight_only) < TOLERANCE, m


@pytest.mark.parametrize("kind", ["int8", "int4", "fp8"])
@pytest.mark.parametrize("m", [1, 3, 16])
def test_split_k_is_deterministic_and_leaves_counters_zero(kind, m):
    """Qwen3-0.6B's down_proj at decode shapes splits K; repeated launches give the same bits."""
    from model_optimizer.runtime.kernels import quant_matmul as launcher

    if kind == "fp8" and not _has_fp8():
        pytest.skip("fp8 kernels need sm_89+")
    q, s, z, w = _weight(kind, 1024, 3072)
    tiles = launcher.choose_tiles(m, 1024, 3072, kind, 128, torch.cuda.get_device_properties(0).multi_processor_count)
    assert tiles.split_k > 1
    x = torch.randn(m, 3072, device="cuda").bfloat16()
    bias = torch.randn(1024, device="cuda").bfloat16()
    outs = [_linear(kind, x, q, s, z, bias) for _ in range(5)]
    assert all(torch.equal(outs[0], o) for o in outs[1:])
    assert relative_error(outs[0], x.float() @ w.T + bias.float()) < TOLERANCE
    torch.cuda.synchronize()
    assert not launcher._counters[x.device].any()


@pytest.mark.parametrize("kind", ["int8", "int4", "fp8"])
@pytest.mark.parametrize("m", [1, 8, 64])
def test_cuda_graph_replays_match_eager(kind, m):
    """Captured once, replayed on new inputs: no host sync, no allocation that outlives the capture."""
    if kind == "fp8" and not _has_fp8():
        pytest.skip("fp8 kernels need sm_89+")
    q, s, z, w = _weight(kind, 4096, 4096)
    static_x = torch.randn(m, 4096, device="cuda").bfloat16()
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        for _ in range(2):  # compile and settle outside the capture, as the runner does
            _linear(kind, static_x, q, s, z)
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        static_out = _linear(kind, static_x, q, s, z)
    for seed in range(3):
        x = torch.randn(m, 4096, device="cuda", generator=torch.Generator("cuda").manual_seed(seed)).bfloat16()
        static_x.copy_(x)
        graph.replay()
        torch.cuda.synchronize()
        assert torch.equal(static_out, _linear(kind, x, q, s, z)), seed


def test_quantize_rows_fp8_matches_reference():
    from model_optimizer.runtime.kernels.quant_matmul import quantize_rows_fp8

    x = (torch.randn(300, 4096, device="cuda") * torch.logspace(-3, 3, 300, device="cuda")[:, None]).bfloat16()
    x[7] = 0
    got_q, got_scales = quantize_rows_fp8(x)
    want_q, want_scales = ref.quantize_rows_fp8_ref(x)
    torch.testing.assert_close(got_scales, want_scales, rtol=1e-6, atol=0)
    # Triton's float division is not IEEE-exact: a value on a rounding boundary may land one step away
    got, want = got_q.float(), want_q.float()
    assert (got != want).float().mean() < 1e-3
    assert ((got - want).abs() <= want.abs() / 8 + 1e-30).all()


def test_group_size_without_a_kernel_falls_back_to_the_reference():
    from model_optimizer.runtime.kernels.quant_linear import w4a16_linear

    w = torch.randn(256, 512, device="cuda").bfloat16()
    q, s, z = quantize_int4(w, 8).astuple()  # 8 columns per group: less than one kernel tile
    x = torch.randn(4, 512, device="cuda").bfloat16()
    assert torch.equal(w4a16_linear(x, q, s, z, 8), ref.w4a16_linear_ref(x, q, s, z, 8))


@pytest.mark.parametrize("kind", ["int8", "int4", "fp8"])
@pytest.mark.parametrize("m", [1, 8])
def test_sweep_timing_captures_the_decode_call_in_a_graph(kind, m, monkeypatch):
    """benchmarks/gpu_time.py times a candidate from CUDA-graph replays; a decode launch that could
    not be captured (host sync, new allocation) would fall back to stream timing: forbidden here."""
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
    import gpu_time

    from model_optimizer.runtime.kernels import quant_matmul as launcher
    from model_optimizer.runtime.kernels.quant_tiles import candidates

    if kind == "fp8" and not _has_fp8():
        pytest.skip("fp8 kernels need sm_89+")

    def no_fallback(*args, **kwargs):
        raise AssertionError("the call could not be captured in a CUDA graph")

    monkeypatch.setattr(gpu_time, "stream_time_ms", no_fallback)
    q, s, z, w = _weight(kind, 1024, 3072)
    x = torch.randn(m, 3072, device="cuda").bfloat16()
    num_sms = torch.cuda.get_device_properties(0).multi_processor_count
    found = candidates(kind, m, 1024, 3072, num_sms)
    gemvs = [t for t in found if t.block_m == 1]  # with and without the register prefetch
    for tiles in [t for t in found if t.block_m != 1][:2] + gemvs[:2] + gemvs[-1:]:
        ms = gpu_time.gpu_time_ms(
            lambda ws, t=tiles: launcher.quant_matmul(x, *ws, kind, 128, None, t), [(q, s, z)] * 2
        )
        assert ms > 0, tiles
    torch.cuda.synchronize()
    assert not launcher._counters[x.device].any()
