"""Quantized linear kernels on CUDA at Qwen3-0.6B's and Llama-3.1-8B's linear shapes, against the
float32 product with the dequantized weight, and inside CUDA graphs.

Bounds on ||out - ref|| / ||ref|| (bf16 output, float32 accumulation): weight-only paths 1e-2 (a
bf16 rounding of the output is ~4e-3). fp8 from 17 rows may run W8A8 (our e4m3 x e4m3 program or
`torch._scaled_mm`, per-token fp8 activations): 1e-2 against the reference that quantizes the
activations the same way, 6e-2 against the weight-only product (e4m3's 3 mantissa bits on Gaussian
activations: ~3%). int8 layers with dynamic activations (int8-w8a8) from 17 rows likewise (our int8 x
int8 program or `torch._int_mm`) against `int8_w8a8_linear_ref`. The widening of each weight in registers (PTX on sm_90) is checked exactly, code
by code, through one-hot activations: one product per output, so the output is the weight itself.
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
    kind = "int8" if kind == "int8-w8a8" else kind  # the same weights; the activations differ
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
        else:  # the kernels' packing, as the layers hold it once loaded on a GPU
            q, s, z = quantize_int4(w.bfloat16(), 128).astuple()
            w = ref.dequantize_int4(q, s, z, 128, torch.float32)  # float32 as the others (scales are bf16)
            _weights[key] = (ref.repack_int4(q, "sequential", "planes"), s, z, w)
    return _weights[key]


def _linear(kind, x, q, s, z, bias=None):
    from model_optimizer.runtime.kernels.quant_linear import fp8_linear, w4a16_linear, w8a16_linear

    if kind in ("int8", "int8-w8a8"):
        return w8a16_linear(x, q, s, bias, dynamic_activations=kind == "int8-w8a8")
    if kind == "fp8":
        return fp8_linear(x, q, s, bias)
    return w4a16_linear(x, q, s, z, 128, bias, packing="planes")


def _fp8_kernel(x, n: int) -> str:
    """Which fp8 path runs above 16 rows (tile table): scaled_mm or w8a8 (quantized activations), mma..."""
    from model_optimizer.runtime.kernels.quant_linear import FP8_W8A8_MIN_ROWS
    from model_optimizer.runtime.kernels.quant_matmul import device_tiles

    return device_tiles(x, n, "fp8", 0, w8a8=x.shape[0] >= FP8_W8A8_MIN_ROWS).kernel


def _int8_quantizes(x, n: int) -> bool:
    """Whether int8 with dynamic activations runs W8A8 here (our int8 x int8 program or cuBLAS's)."""
    from model_optimizer.runtime.kernels.quant_linear import INT8_W8A8_MIN_ROWS
    from model_optimizer.runtime.kernels.quant_matmul import device_tiles

    return device_tiles(x, n, "int8", 0, w8a8=x.shape[0] >= INT8_W8A8_MIN_ROWS).quantizes_activations


@pytest.mark.parametrize("kind", ["int8", "int4", "fp8", "int8-w8a8"])
@pytest.mark.parametrize(("model", "n", "k"), CASES)
def test_real_shapes_match_dequantized_weight(kind, model, n, k):
    if kind == "fp8" and not _has_fp8():
        pytest.skip("fp8 kernels need sm_89+")
    q, s, z, w = _weight(kind, n, k)
    for m in (1, 2, 8, 32, 64, 256, 512):
        x = torch.randn(m, k, device="cuda", generator=torch.Generator("cuda").manual_seed(m)).bfloat16()
        out = _linear(kind, x, q, s, z)
        assert out.shape == (m, n) and out.dtype == torch.bfloat16
        weight_only = x.float() @ w.T
        if kind == "fp8" and _fp8_kernel(x, n) in ("scaled_mm", "w8a8"):
            assert relative_error(out, ref.fp8_w8a8_linear_ref(x, q, s)) < TOLERANCE, (m, "vs W8A8 reference")
            assert relative_error(out, weight_only) < W8A8_VS_WEIGHT_ONLY, (m, "vs weight-only")
        elif kind == "int8-w8a8" and _int8_quantizes(x, n):
            assert relative_error(out, ref.int8_w8a8_linear_ref(x, q, s)) < TOLERANCE, (m, "vs W8A8 reference")
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
    assert not launcher._counters.by_device[x.device].any()


@pytest.mark.parametrize(
    ("kind", "m"),
    [(kind, m) for kind in ("int8", "int4", "fp8") for m in (1, 8, 64)] + [("int8-w8a8", m) for m in (64, 128, 256)],
)
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
    # the kernel divides with round-to-nearest as torch; should a code still differ, by one e4m3 step:
    # 1/8 of the value for normal codes, 2**-9 for subnormal ones (|x| < 2**-6 of 448, codes 0 included)
    got, want = got_q.float(), want_q.float()
    assert (got != want).float().mean() < 1e-4
    assert ((got - want).abs() <= torch.clamp(want.abs() / 8, min=2.0**-9)).all()


def test_quantize_rows_int8_matches_reference_exactly():
    from model_optimizer.runtime.kernels.quant_matmul import quantize_rows_int8

    x = (torch.randn(300, 4096, device="cuda") * torch.logspace(-3, 3, 300, device="cuda")[:, None]).bfloat16()
    x[7] = 0
    x[9, :3] = torch.tensor([127.0, 2.5, -3.5], device="cuda")  # scale 1: ties, rounded to even
    x[9, 3:] = x[9, 3:].clamp(-100, 100)
    got_q, got_scales = quantize_rows_int8(x)
    want_q, want_scales = ref.quantize_rows_int8_ref(x)
    assert torch.equal(got_scales, want_scales)
    assert torch.equal(got_q, want_q)
    assert got_q[9, :3].tolist() == [127, 2, -4]


@pytest.mark.parametrize(("model", "n", "k"), CASES)
@pytest.mark.parametrize("m", [17, 64, 256])
def test_int8_w8a8_tiles_match_the_reference(model, n, k, m):
    """Every int8 W8A8 candidate of the row bucket (the sweep's and the table's choices) against
    int8_w8a8_linear_ref; and w8a16_linear with dynamic activations, whatever the table picks."""
    from model_optimizer.runtime.kernels.quant_linear import w8a16_linear
    from model_optimizer.runtime.kernels.quant_matmul import int_mm_w8a8, quant_matmul
    from model_optimizer.runtime.kernels.quant_tiles import candidates

    q, s, _, w = _weight("int8", n, k)
    x = torch.randn(m, k, device="cuda", generator=torch.Generator("cuda").manual_seed(m)).bfloat16()
    want = ref.int8_w8a8_linear_ref(x.float(), q, s)
    found = [t for t in candidates("int8", m, n, k, 132, w8a8=True) if t.w8a8]
    assert found
    for tiles in found:
        assert relative_error(quant_matmul(x, q, s, None, "int8", 0, None, tiles), want) < TOLERANCE, tiles
    assert relative_error(int_mm_w8a8(x, q, s), want) < TOLERANCE  # cuBLAS's int8 GEMM, the scales after
    out = w8a16_linear(x, q, s, dynamic_activations=True)
    assert relative_error(out, x.float() @ w.T) < W8A8_VS_WEIGHT_ONLY


@pytest.mark.parametrize(("model", "n", "k"), CASES)
@pytest.mark.parametrize("m", [1, 5, 16, 32])
def test_int4_candidates_match_the_dequantized_weight(model, n, k, m):
    """Every int4 candidate of the decode row buckets (warp-group tiles, mma.sync tiles of 1-2 warps, an
    accumulator per plane, the GEMVs) against the dequantized weight: the sweep may pick any of them."""
    from model_optimizer.runtime.kernels.quant_matmul import quant_matmul
    from model_optimizer.runtime.kernels.quant_tiles import candidates

    q, s, z, w = _weight("int4", n, k)
    x = torch.randn(m, k, device="cuda", generator=torch.Generator("cuda").manual_seed(m)).bfloat16()
    want = x.float() @ w.T
    found = [t for t in candidates("int4", m, n, k, 132) if t.backend == "triton"]
    assert any(t.num_warps < 4 for t in found)
    for tiles in found:
        assert relative_error(quant_matmul(x, q, s, z, "int4", 128, None, tiles), want) < TOLERANCE, tiles


def _gluon_runs() -> bool:
    from model_optimizer.runtime.kernels.int4_gluon import fits

    return fits(torch.zeros(1, 128, device="cuda", dtype=torch.bfloat16), torch.zeros(64, 1, device="cuda",
                dtype=torch.bfloat16), 128, 64)  # fmt: skip


@pytest.mark.parametrize(("model", "n", "k"), CASES)
@pytest.mark.parametrize("m", [17, 64, 100, 200, 256])
def test_gluon_int4_candidates_match_the_dequantized_weight(model, n, k, m):
    """Every launch shape of the Gluon int4 kernel (sm_90) the sweep may pick for the rows' bucket (so at
    100 and 200 rows token tiles that run past the rows: masked chunks of the split sum), with a bias, against the
    dequantized weight; split-K launches give the same bits twice and leave their counters zero; and
    where the H200 table names Gluon, w4a16_linear takes it."""
    from model_optimizer.runtime.kernels.int4_gluon import COUNTERS, int4_gluon_matmul
    from model_optimizer.runtime.kernels.quant_matmul import device_tiles
    from model_optimizer.runtime.kernels.quant_tiles import gluon_candidates, row_bucket

    if not _gluon_runs():
        pytest.skip("the Gluon int4 kernel needs an sm_90 GPU")
    q, s, z, w = _weight("int4", n, k)
    x = torch.randn(m, k, device="cuda", generator=torch.Generator("cuda").manual_seed(m)).bfloat16()
    bias = torch.randn(n, device="cuda").bfloat16()
    want = x.float() @ w.T + bias.float()
    found = gluon_candidates(row_bucket(m), n, k, torch.cuda.get_device_properties(0).multi_processor_count)
    assert found
    for t in found:
        args = (t.block_n, t.block_m, t.num_warps, t.num_stages, t.split_k, bias)
        out = int4_gluon_matmul(x, q.view(torch.int16), s, z, *args)
        assert relative_error(out, want) < TOLERANCE, t
        assert torch.equal(out, int4_gluon_matmul(x, q.view(torch.int16), s, z, *args)), t
    torch.cuda.synchronize()
    assert not any(c.any() for c in COUNTERS.by_device.values())
    if device_tiles(x, n, "int4", 128).backend == "gluon":
        assert relative_error(_linear("int4", x, q, s, z, bias), want) < TOLERANCE


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
    for tiles in [t for t in found if t.kernel == "mma"][:2] + gemvs[:2] + gemvs[-1:]:
        ms = gpu_time.gpu_time_ms(
            lambda ws, t=tiles: launcher.quant_matmul(x, *ws, kind, 128, None, t), [(q, s, z)] * 2
        )
        assert ms > 0, tiles
    torch.cuda.synchronize()
    assert not launcher._counters.by_device[x.device].any()


def _one_hot_product(kind, q, s, z, tiles, dtype):
    """x = the identity: out[m, n] is weight[n, m] itself (one product each, float32 accumulation)."""
    from model_optimizer.runtime.kernels import quant_matmul as launcher

    k = q.shape[1] * (8 if kind == "int4" else 1)
    x = torch.eye(k, device="cuda", dtype=dtype)
    return launcher.quant_matmul(x, q, s, z, kind, 128 if kind == "int4" else 0, None, tiles).T


def _all_codes(kind, dtype):
    """(qweight, scales, zeros, reference weight in dtype) holding every code of the format."""
    if kind == "int4":  # every code against every zero point, in every plane of a lane
        rows, cols = torch.arange(64)[:, None], torch.arange(256)[None, :]
        codes = (cols % 32 + rows * 3 + cols // 32) % 16
        zeros = ((rows + torch.arange(2)[None, :] * 7) % 16).to(torch.uint8)
        scales = torch.linspace(0.01, 3.0, 128).view(64, 2).to(dtype)
        q = ref.pack_int4_planes(codes)
        return q.cuda(), scales.cuda(), zeros.cuda(), ref.dequantize_int4(q, scales, zeros, 128, dtype, "planes").cuda()
    codes = torch.arange(256, dtype=torch.int32).to(torch.uint8).repeat(64, 1).roll(1, 0)
    if kind == "fp8":
        codes[(codes & 0x7F) == 0x7F] = 0  # NaN codes are never weights
        q = codes.view(ref.FP8_DTYPE)
    else:
        q = codes.view(torch.int8)
    scales = torch.logspace(-3, 1, 64)
    dequantize = ref.dequantize_int8 if kind == "int8" else ref.dequantize_fp8
    return q.cuda(), scales.cuda(), None, dequantize(q, scales, dtype).cuda()


@pytest.mark.parametrize("kind", ["int8", "fp8", "int4"])
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_widening_in_registers_is_exact_for_every_code(kind, dtype):
    """The PTX widening (quant_dequant) of every int8 / e4m3 byte and every int4 code and zero point,
    in the tensor-core program (one-hot activations; 64 and 128 rows a warp group) and the whole-weight
    dequantization: each weight value exactly the reference's."""
    from model_optimizer.runtime.kernels.quant_matmul import QuantTiles, dequantize_weight

    if kind == "fp8" and not _has_fp8():
        pytest.skip("fp8 kernels need sm_89+")
    q, s, z, want = _all_codes(kind, dtype)
    for tiles in (QuantTiles(16, 64, 128, 1), QuantTiles(64, 128, 128, 2), QuantTiles(16, 256, 128, 1, num_warps=8)):
        assert torch.equal(_one_hot_product(kind, q, s, z, tiles, dtype).to(dtype), want), tiles
    assert torch.equal(dequantize_weight(q, s, z, kind, 128 if kind == "int4" else 0, dtype), want)


def test_w8a8_tiles_match_the_quantized_activation_reference():
    from model_optimizer.runtime.kernels.quant_matmul import QuantTiles, quant_matmul

    if not _has_fp8():
        pytest.skip("fp8 kernels need sm_89+")
    q, s, _, w = _weight("fp8", 4096, 4096)
    for m in (1, 16, 64, 200):
        x = torch.randn(m, 4096, device="cuda").bfloat16()
        for tiles in (QuantTiles(16, 128, 256, 4, w8a8=True), QuantTiles(64, 128, 128, 2, w8a8=True)):
            out = quant_matmul(x, q, s, None, "fp8", 0, None, tiles)
            assert relative_error(out, ref.fp8_w8a8_linear_ref(x, q, s)) < TOLERANCE, (m, tiles)
            assert relative_error(out, x.float() @ w.T) < W8A8_VS_WEIGHT_ONLY, (m, tiles)


@pytest.mark.parametrize("kind", ["int8", "int4", "fp8"])
def test_dequant_backend_and_its_fallback_inside_a_capture(kind, monkeypatch):
    """Prefill sizes: the weight widened once into the scratch buffer and a dense matmul; inside a
    CUDA-graph capture the same where the buffer already holds the weight, else (it is never grown
    there) the launch the table or default rule names for a capture. Same product each way."""
    from model_optimizer.runtime.kernels import quant_linear, triton_kernel
    from model_optimizer.runtime.kernels.quant_tiles import DEQUANT

    if kind == "fp8" and not _has_fp8():
        pytest.skip("fp8 kernels need sm_89+")
    dequantized = []

    def kernels(module, name):  # the table says "dequant" for every shape, except for a capture's choice
        real = triton_kernel(module, name)
        if name == "device_tiles":
            return lambda *a, graph_safe=False, **k: real(*a, graph_safe=True, **k) if graph_safe else DEQUANT
        if name == "dequantize_weight":
            return lambda *a: dequantized.append(a[0].shape) or real(*a)
        return real

    monkeypatch.setattr(quant_linear, "triton_kernel", kernels)
    quant_linear._scratch.clear()
    q, s, z, w = _weight(kind, 1024, 3072)
    x = torch.randn(300, 3072, device="cuda").bfloat16()
    out = _linear(kind, x, q, s, z)
    assert relative_error(out, x.float() @ w.T) < TOLERANCE
    assert quant_linear._scratch[(x.device, torch.bfloat16)].numel() >= 1024 * 3072 and len(dequantized) == 1
    graph = torch.cuda.CUDAGraph()  # the buffer exists (the warm-up above): the capture takes the dense path
    with torch.cuda.graph(graph):
        static = _linear(kind, x[:8], q, s, z)
    graph.replay()
    torch.cuda.synchronize()
    assert len(dequantized) == 2 and relative_error(static, x[:8].float() @ w.T) < TOLERANCE
    quant_linear._scratch.clear()  # a capture must not allocate the buffer
    graph = torch.cuda.CUDAGraph()
    group = 128 if kind == "int4" else 0
    triton_kernel("quant_matmul", "quant_matmul")(x[:8], q, s, z, kind, group)  # compile outside the capture
    with torch.cuda.graph(graph):
        static = _linear(kind, x[:8], q, s, z)
    graph.replay()
    torch.cuda.synchronize()
    assert not quant_linear._scratch and len(dequantized) == 2
    assert relative_error(static, x[:8].float() @ w.T) < TOLERANCE


@pytest.mark.parametrize("kind", ["int8", "int4", "fp8"])
def test_large_decode_batches_capture_with_the_real_table(kind, monkeypatch):
    """Decode graphs of 128 and 256 rows with whatever table this GPU has (the H200's says "dequant"
    for many shapes there): captured (no fallback to eager timing) and equal to the eager product."""
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
    import gpu_time

    from model_optimizer.runtime.kernels import aot, quant_linear
    from model_optimizer.runtime.kernels import quant_matmul as launcher

    if kind == "fp8" and not _has_fp8():
        pytest.skip("fp8 kernels need sm_89+")

    def no_fallback(*args, **kwargs):
        raise AssertionError("the call could not be captured in a CUDA graph")

    monkeypatch.setattr(gpu_time, "stream_time_ms", no_fallback)
    q, s, z, w = _weight(kind, 1024, 2048)  # Qwen3-0.6B's o_proj
    launcher._split_counters(torch.device("cuda", torch.cuda.current_device()))
    for m in (128, 256):
        for scratch in (False, True):  # the capture's fallback, then the dense path in the buffer
            quant_linear._scratch.clear()
            if scratch:
                quant_linear._weight_scratch(
                    torch.device("cuda", torch.cuda.current_device()), torch.bfloat16, 1024 * 2048
                )
            static_x = torch.randn(m, 2048, device="cuda").bfloat16()
            with monkeypatch.context() as patch:  # compile what the capture will launch, outside it
                patch.setattr(aot, "capturing", lambda: True)
                _linear(kind, static_x, q, s, z)
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph):
                static = _linear(kind, static_x, q, s, z)
            graph.replay()
            torch.cuda.synchronize()
            assert bool(quant_linear._scratch) == scratch
            bound = W8A8_VS_WEIGHT_ONLY if kind == "fp8" else TOLERANCE  # fp8 rows may quantize activations
            assert relative_error(static, static_x.float() @ w.T) < bound, (m, scratch)
            ms = gpu_time.gpu_time_ms(lambda _, x=static_x: _linear(kind, x, q, s, z), [None] * 2)
            assert ms > 0


def test_int4_layers_hold_the_planes_packing_and_write_the_checkpoint_one(tmp_path):
    """Loaded on the GPU, int4 layers are repacked once for the kernels; what the writer saves from them
    is the checkpoint packing (the same codes as a CPU load)."""
    from model_optimizer.assets import reference_model_path
    from model_optimizer.model.quantize.writer import model_state
    from model_optimizer.runtime.layers.quantization.attach import quantized_layers
    from model_optimizer.runtime.models.loader import load_model

    folder = reference_model_path()
    on_gpu = load_model(folder, "bfloat16", torch.device("cuda"), quantization="rtn-int4")
    on_cpu = load_model(folder, "bfloat16", torch.device("cpu"), quantization="rtn-int4")
    assert {layer.quant_method.packing for _, layer in quantized_layers(on_gpu)} == {"planes"}
    assert {layer.quant_method.packing for _, layer in quantized_layers(on_cpu)} == {"sequential"}
    gpu_state, cpu_state = model_state(on_gpu, "rtn-int4"), model_state(on_cpu, "rtn-int4")
    packed = [k for k in cpu_state if k.endswith("weight_packed")]
    assert packed and all(torch.equal(gpu_state[k], cpu_state[k]) for k in packed)


@pytest.mark.parametrize(("n", "k"), SHAPES["qwen3-0.6b"])
def test_bf16_kind_matches_cublas_and_dense_linear_follows_the_table(n, k):
    """Plain bf16 weights through every GEMV / tensor-core candidate equal cuBLAS's product; dense_linear
    (what Linear calls) gives cuBLAS's result too, whichever the table picked."""
    import torch.nn.functional as F

    from model_optimizer.runtime.kernels.dense_linear import dense_linear
    from model_optimizer.runtime.kernels.quant_matmul import quant_matmul
    from model_optimizer.runtime.kernels.quant_tiles import candidates

    w = torch.randn(n, k, device="cuda").bfloat16()
    num_sms = torch.cuda.get_device_properties(0).multi_processor_count
    for m in (1, 4, 16, 64):
        x = torch.randn(m, k, device="cuda").bfloat16()
        want = F.linear(x, w).float()
        for tiles in candidates("bf16", m, n, k, num_sms):
            if tiles.backend == "triton":
                assert relative_error(quant_matmul(x, w, None, None, "bf16", 0, None, tiles), want) < TOLERANCE, tiles
        assert relative_error(dense_linear(x, w), want) < TOLERANCE, m
