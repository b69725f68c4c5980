"""Quantization methods on real tiny checkpoints: layouts, on-the-fly loading, the engine's output."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from model_optimizer.runtime.kernels import quant_reference as ref
from model_optimizer.runtime.layers.quantization.attach import quantized_layers
from model_optimizer.runtime.layers.quantization.quantizers import quantize_fp8, quantize_int4, quantize_int8
from model_optimizer.runtime.layers.quantization.spec import resolve_spec
from model_optimizer.runtime.models.loader import load_model

CPU = torch.device("cpu")
# worst relative error of one weight element against the row's (or group's) largest
TOLERANCE = {
    "fp8": 1 / 16,
    "int8": 1 / 254 + 1e-6,
    "int8-w8a8": 1 / 254 + 1e-6,
    "rtn-int4": 2 / 15,
}  # int4: one step (rounded zero point)


def test_quantizers_round_trip_within_half_a_step():
    w = torch.randn(16, 256, generator=torch.Generator().manual_seed(0))
    q8 = quantize_int8(w)
    assert q8.qweight.dtype == torch.int8 and q8.scales.shape == (16,)
    err8 = (ref.dequantize_int8(q8.qweight, q8.scales) - w).abs().amax(dim=1)
    assert torch.all(err8 <= q8.scales / 2 + 1e-6)
    q4 = quantize_int4(w, 128, torch.float32)
    assert q4.qweight.shape == (16, 32) and q4.zeros.dtype == torch.uint8 and q4.scales.shape == (16, 2)
    err4 = (ref.dequantize_int4(q4.qweight, q4.scales, q4.zeros, 128) - w).abs().reshape(16, 2, 128).amax(-1)
    assert torch.all(err4 <= q4.scales / 2 + 1e-6)
    f8 = quantize_fp8(w)
    assert f8.qweight.dtype == torch.float8_e4m3fn
    rel = (ref.dequantize_fp8(f8.qweight, f8.scales) - w).abs() / w.abs().clamp(min=1e-3)
    assert rel.amax() <= 1 / 16


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float32])
def test_an_all_zero_int4_group_keeps_a_finite_scale_and_zero_point(dtype):
    """In fp16 the scale floor of an all-zero group (1e-10) rounded to 0, and its zero point became NaN."""
    w = torch.randn(4, 256, generator=torch.Generator().manual_seed(1)).to(dtype)
    w[1, :128] = 0
    q4 = quantize_int4(w, 128)
    assert torch.all(q4.scales.float() > 0) and torch.isfinite(q4.scales.float()).all()
    back = ref.dequantize_int4(q4.qweight, q4.scales, q4.zeros, 128)
    assert torch.isfinite(back.float()).all() and torch.all(back[1, :128] == 0)


@pytest.mark.parametrize("method", ["fp8", "int8", "int8-w8a8", "rtn-int4"])
@pytest.mark.parametrize("arch", ["qwen3", "qwen2"])
def test_on_the_fly_layers_hold_the_rounded_checkpoint(quant_model, method, arch):
    folder = quant_model(arch)
    dense = load_model(folder, "float32", CPU)
    quant = load_model(folder, "float32", CPU, quantization=method)
    layers = quantized_layers(quant)
    assert len(layers) == 4 * 2  # qkv, o, gate_up, down in each of 2 layers
    dense_modules = dict(dense.named_modules())
    for name, layer in layers:
        assert "weight" not in dict(layer.named_parameters()) and layer.qweight.dtype != torch.float32
        original = dense_modules[name].weight
        w = layer.quant_method.dequantize(layer)
        bound = original.abs().amax(dim=1, keepdim=True) * TOLERANCE[method]
        assert torch.all((w - original).abs() <= bound + 1e-6), name
        x = torch.randn(5, layer.in_features)
        if method in ("int8-w8a8", "fp8"):  # the CPU quantizes the activations per token too, as a GPU batch
            w8a8 = ref.int8_w8a8_linear_ref if method == "int8-w8a8" else ref.fp8_w8a8_linear_ref
            want = w8a8(x, layer.qweight, layer.scales, dense_modules[name].bias)
            assert torch.allclose(layer(x), want, atol=1e-5)
            assert not torch.allclose(layer(x), F.linear(x, w, dense_modules[name].bias), atol=1e-5)
        else:
            assert torch.allclose(layer(x), F.linear(x, w, dense_modules[name].bias), atol=1e-5)
    # untouched: norms and embeddings
    assert torch.equal(quant.model.embed_tokens.weight, dense.model.embed_tokens.weight)


def test_dummy_weights_are_quantized_too(quant_model):
    model = load_model(quant_model("qwen3"), "float32", CPU, load_format="dummy", quantization="rtn-int4")
    name, layer = quantized_layers(model)[0]
    assert layer.qweight.dtype == torch.int32 and layer.zeros.dtype == torch.uint8


def test_quantization_requests_are_checked():
    with pytest.raises(ValueError, match="needs calibration data"):
        resolve_spec({}, "awq")
    with pytest.raises(ValueError, match="must be one of"):
        resolve_spec({}, "int3")
    assert resolve_spec({}, None) is None and resolve_spec({}, "none") is None
    assert resolve_spec({}, "int8-w8a8").method == "int8-w8a8"  # int8 weights, activations per token (GPU)
    w8a8 = {"quantization_config": _w8a8_config()}
    assert resolve_spec(w8a8, None).method == "int8-w8a8"
    assert resolve_spec(w8a8, "int8").method == "int8"  # the same weights, activations kept exact
    static = _w8a8_config()
    static["config_groups"]["group_0"]["input_activations"].update(strategy="tensor", dynamic=False)
    assert resolve_spec({"quantization_config": static}, None).method == "int8"  # static scales: weight-only
    quantized = {"quantization_config": {"quant_method": "awq", "bits": 4, "group_size": 128, "version": "gemm"}}
    with pytest.raises(ValueError, match="already quantized"):
        resolve_spec(quantized, "fp8")
    with pytest.raises(ValueError, match="not supported"):
        resolve_spec({"quantization_config": {"quant_method": "gptq"}}, None)


def _w8a8_config() -> dict:
    """llm-compressor's W8A8 (int8) quantization_config, as our writer makes it."""
    from model_optimizer.model.quantize.writer import compressed_tensors_config

    return compressed_tensors_config("int8-w8a8", 128)


def test_group_size_that_does_not_tile_a_layer_is_refused(tiny_model):
    with pytest.raises(ValueError, match="do not tile in_features 64"):
        load_model(tiny_model("qwen3"), "float32", CPU, quantization="rtn-int4")


@pytest.mark.parametrize("method", ["fp8", "int8", "rtn-int4"])
def test_engine_generates_with_quantized_weights(quant_model, method):
    from model_optimizer import LLM, SamplingParams

    llm = LLM(str(quant_model("qwen3")), quantization=method, dtype="float32", kv_cache_memory=1 << 22)
    assert len(quantized_layers(llm.runner.model)) == 8
    out = llm.generate(["def main():"], SamplingParams(max_tokens=6, temperature=0.0, ignore_eos=True))
    assert len(out[0].outputs[0].token_ids) == 6


@pytest.mark.parametrize(
    "qc",
    [
        {"quant_method": "compressed-tensors", "config_groups": "x"},
        {"quant_method": "compressed-tensors", "config_groups": {"g": {"weights": [1]}}},
        {"quant_method": "awq", "group_size": [128]},
        {"quant_method": "fp8", "weight_block_size": [[128], 128]},
    ],
)
def test_a_malformed_quantization_config_is_one_value_error(qc):
    from model_optimizer.runtime.layers.quantization.spec import resolve_spec

    with pytest.raises(ValueError, match="config.json: quantization_config"):
        resolve_spec({"quantization_config": qc}, None)
