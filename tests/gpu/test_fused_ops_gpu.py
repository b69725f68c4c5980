"""The fused element-wise Triton kernels on CUDA at real model shapes, against the eager functions
run on the same GPU; and an engine on a real model config that never imports torch's compiler.

Shapes: hidden 1024 (Qwen3-0.6B) and 4096 (Llama-8B), intermediate 3072 and 14336, 1 to 4096 tokens,
bfloat16. Both sides round where transformers does, so they agree bit for bit except where the
float32 statistics, summed in another order (or rsqrt / exp approximated), move a value across a
rounding boundary.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from tests.runtime.server.test_process import REPO

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")]

CONFIGS = Path(__file__).resolve().parents[2] / "benchmarks" / "configs"
TOKENS = [1, 7, 64, 4096]


def _near(got: torch.Tensor, want: torch.Tensor) -> None:
    """At most two bfloat16 units in the last place apart, and at least 98% of elements equal."""
    assert got.dtype == want.dtype and got.shape == want.shape and got.is_cuda
    info = torch.finfo(want.dtype)
    ulp = info.eps * torch.exp2(torch.floor(torch.log2(want.float().abs().clamp_min(info.tiny))))
    diff = (got.float() - want.float()).abs()
    assert (diff <= 2 * ulp).all(), diff.max().item()
    assert (got == want).float().mean().item() >= 0.98


@pytest.mark.parametrize("hidden", [1024, 4096])
@pytest.mark.parametrize("num_tokens", TOKENS)
def test_add_rms_norm_and_rms_norm_match_eager(hidden, num_tokens):
    from model_optimizer.runtime.kernels import fused_ops
    from model_optimizer.runtime.layers.norm import _add_rms_norm, _rms_norm

    gen = torch.Generator(device="cuda").manual_seed(hidden + num_tokens)
    x, residual = (torch.randn(2, num_tokens, hidden, device="cuda", generator=gen) * 3).bfloat16()
    weight = (1 + 0.3 * torch.randn(hidden, device="cuda", generator=gen)).bfloat16()
    got_out, got_sum = fused_ops.add_rms_norm(x, residual, weight, 1e-6)
    want_out, want_sum = _add_rms_norm.__wrapped__(x, residual, weight, 1e-6)
    assert torch.equal(got_sum, want_sum)  # one rounding of an exact float32 sum on both sides
    _near(got_out, want_out)
    _near(fused_ops.rms_norm(x, weight, 1e-6), _rms_norm.__wrapped__(x, weight, 1e-6))
    # the layer on CUDA tensors is the kernel
    assert torch.equal(_add_rms_norm(x, residual, weight, 1e-6)[0], got_out)


@pytest.mark.parametrize("intermediate", [3072, 14336])
@pytest.mark.parametrize("num_tokens", TOKENS)
def test_silu_and_mul_matches_eager(intermediate, num_tokens):
    from model_optimizer.runtime.kernels import fused_ops
    from model_optimizer.runtime.layers.activation import silu_and_mul

    gen = torch.Generator(device="cuda").manual_seed(intermediate + num_tokens)
    gate_up = (torch.randn(num_tokens, 2 * intermediate, device="cuda", generator=gen) * 3).bfloat16()
    got = fused_ops.silu_and_mul(gate_up)
    _near(got, silu_and_mul.__wrapped__(gate_up))
    assert torch.equal(silu_and_mul(gate_up), got)


def test_strided_rows_match_eager_on_cuda():
    """Row views of one wider buffer, as split projections hand them over."""
    from model_optimizer.runtime.kernels import fused_ops
    from model_optimizer.runtime.layers.norm import _add_rms_norm

    both = (torch.randn(64, 2 * 1024, device="cuda") * 3).bfloat16()
    x, residual = both[:, :1024], both[:, 1024:]
    weight = torch.ones(1024, device="cuda", dtype=torch.bfloat16)
    for got, want in zip(
        fused_ops.add_rms_norm(x, residual, weight, 1e-6), _add_rms_norm.__wrapped__(x, residual, weight, 1e-6)
    ):
        _near(got, want)


def test_engine_on_a_real_config_never_imports_torch_compile(tmp_path):
    """Qwen3-0.6B with dummy weights, CUDA graphs on (the default): start, generate, and neither
    torch._inductor nor torch._dynamo was ever imported; Triton's cache filled our folder."""
    code = (
        "import json, os, sys\nfrom model_optimizer import LLM, SamplingParams\n"
        f"llm = LLM({str(CONFIGS / 'qwen3-0.6b')!r}, load_format='dummy', dtype='bfloat16', max_model_len=512,"
        " gpu_memory_utilization=0.3)\n"
        "params = SamplingParams(temperature=0, max_tokens=8, ignore_eos=True, detokenize=False)\n"
        "out = llm.generate([[1, 2, 3, 4]] * 3, params)\n"
        "print(json.dumps({'loaded': sorted(m for m in ('torch._inductor', 'torch._dynamo') if m in sys.modules),"
        " 'tokens': [len(o.outputs[0].token_ids) for o in out], 'triton_dir': os.environ['TRITON_CACHE_DIR']}))"
    )
    env = {k: v for k, v in os.environ.items() if k not in ("TRITON_CACHE_DIR", "TORCHINDUCTOR_CACHE_DIR")}
    env.update(
        {"MOPT_COMPILE_CACHE_DIR": str(tmp_path), "PYTHONPATH": str(REPO) + os.pathsep + env.get("PYTHONPATH", "")}
    )
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO, env=env, capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr[-3000:]
    seen = json.loads(out.stdout.strip().splitlines()[-1])
    assert seen["loaded"] == []
    assert seen["tokens"] == [8, 8, 8]
    assert seen["triton_dir"].startswith(str(tmp_path)) and any(os.scandir(seen["triton_dir"]))


@pytest.mark.parametrize(("hidden", "intermediate"), [(1024, 3072), (4096, 14336)])
def test_gated_projection_is_the_projection_then_silu_and_mul(hidden, intermediate):
    """An MLP's [gate | up] projection at one token with the SiLU-and-mul in the GEMV's launch (where the
    tile table runs our GEMV for the shape) against the projection then the SiLU-and-mul kernel; both
    replayed from a CUDA graph as decode runs them."""
    from model_optimizer.runtime.layers.activation import silu_and_mul
    from model_optimizer.runtime.layers.linear import MergedLinear

    layer = MergedLinear(hidden, {"gate": intermediate, "up": intermediate}).cuda().bfloat16()
    torch.nn.init.normal_(layer.weight, std=hidden**-0.5)
    x = torch.randn(1, hidden, device="cuda", dtype=torch.bfloat16)
    want = silu_and_mul(layer(x))
    _near(layer.forward_gated(x), want)
    graph = torch.cuda.CUDAGraph()
    layer.forward_gated(x)  # outside the capture first: the split-K counters exist
    with torch.cuda.graph(graph):
        out = layer.forward_gated(x)
    x.copy_(torch.randn_like(x))
    graph.replay()
    _near(out, silu_and_mul(layer(x)))


@pytest.mark.parametrize("kind", ["int8", "fp8"])
@pytest.mark.parametrize(("hidden", "intermediate"), [(1024, 3072), (4096, 14336)])
def test_gated_quantized_projection_is_the_projection_then_silu_and_mul(kind, hidden, intermediate):
    """The same for an int8 or fp8 [gate | up] projection (quant_linear.gated_gemv), where the tile table
    runs our weight-only GEMV at one row; a shape it runs on the tensor cores keeps the two steps (None)."""
    from model_optimizer.runtime.kernels import quant_linear
    from model_optimizer.runtime.layers.activation import silu_and_mul
    from model_optimizer.runtime.layers.quantization.quantizers import quantize_fp8, quantize_int8

    w = torch.randn(2 * intermediate, hidden, device="cuda") * hidden**-0.5
    q, s = (quantize_int8 if kind == "int8" else quantize_fp8)(w).astuple()
    linear = quant_linear.w8a16_linear if kind == "int8" else quant_linear.fp8_linear
    x = torch.randn(1, hidden, device="cuda", dtype=torch.bfloat16)
    got = quant_linear.gated_gemv(kind, x, q, s)
    if got is None:
        pytest.skip(f"the tile table runs {kind} {2 * intermediate}x{hidden} at one row on the tensor cores")
    _near(got, silu_and_mul(linear(x, q, s)))
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = quant_linear.gated_gemv(kind, x, q, s)
    x.copy_(torch.randn_like(x))
    graph.replay()
    _near(out, silu_and_mul(linear(x, q, s)))
