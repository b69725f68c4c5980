"""Quantized checkpoint layouts the loader reads: AutoAWQ GEMM and block-wise FP8 built here, and what the
compressed-tensors package itself compresses (what we write: tests/model/quantize/test_writer.py)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file, save_file

from model_optimizer.model.quantize.writer import save_compressed_tensors
from model_optimizer.runtime.kernels import quant_reference as ref
from model_optimizer.runtime.layers.quantization.attach import quantized_layers
from model_optimizer.runtime.layers.quantization.quantizers import FP8_MAX, quantize_int4_codes
from model_optimizer.runtime.layers.quantization.sources import pack_awq, unpack_awq
from model_optimizer.runtime.models.loader import load_model
from tests.runtime.layers.quantization.shards import dequantized_shards

CPU = torch.device("cpu")
LINEAR_NAMES = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")


def _rewrite(src: Path, dst: Path, convert, quantization_config: dict) -> dict[str, torch.Tensor]:
    """Copy a float checkpoint, replacing each linear weight by convert(name, weight) -> tensors;
    returns the float weights each layer should dequantize to."""
    shutil.copytree(src, dst)
    state = load_file(str(src / "model.safetensors"))
    out, expected = {}, {}
    for name, tensor in state.items():
        if name.endswith(".weight") and name.split(".")[-2] in LINEAR_NAMES:
            tensors, dequantized = convert(tensor.float())
            out.update({name[: -len("weight")] + k: v for k, v in tensors.items()})
            expected[name[: -len(".weight")]] = dequantized
        else:
            out[name] = tensor
    save_file(out, str(dst / "model.safetensors"))
    config = json.loads((src / "config.json").read_text())
    config["quantization_config"] = quantization_config
    (dst / "config.json").write_text(json.dumps(config))
    return expected


def test_awq_packing_order_round_trips_and_matches_autoawq():
    codes = torch.arange(16, dtype=torch.int32).repeat(3, 1)[:, :16]  # (3, 16): column c holds c
    packed = pack_awq(codes)
    assert torch.equal(unpack_awq(packed), codes)
    # AutoAWQ's order: nibble i of word 0 holds column [0, 2, 4, 6, 1, 3, 5, 7][i]
    nibbles = [(int(packed[0, 0]) >> (4 * i)) & 0xF for i in range(8)]
    assert nibbles == [0, 2, 4, 6, 1, 3, 5, 7]


def test_autoawq_gemm_checkpoint_loads(quant_model, tmp_path):
    def convert(w):
        q, scales, zeros = quantize_int4_codes(w, 128, torch.float16)
        tensors = {
            "qweight": pack_awq(q.T.contiguous()),  # (K, N // 8)
            "qzeros": pack_awq(zeros.to(torch.int32).T.contiguous()),  # (K // G, N // 8)
            "scales": scales.T.contiguous().to(torch.float16),  # (K // G, N)
        }
        dq = (q.reshape(q.shape[0], -1, 128).float() - zeros[..., None]) * scales.half().float()[..., None]
        return tensors, dq.reshape(q.shape)

    qc = {"quant_method": "awq", "bits": 4, "group_size": 128, "version": "gemm", "zero_point": True}
    expected = _rewrite(quant_model("qwen2"), tmp_path / "awq", convert, qc)
    model = load_model(tmp_path / "awq", "float32", CPU)
    got = dequantized_shards(model)
    assert set(got) == set(expected)
    for name, w in expected.items():
        assert torch.allclose(got[name], w, atol=1e-6), name


def test_blockwise_fp8_checkpoint_is_requantized_per_channel(quant_model, tmp_path):
    def convert(w):
        n, k = w.shape
        blocks = w.reshape(-(-n // 128), min(n, 128), k // 128, 128) if n % 128 == 0 else None
        scale = torch.empty(-(-n // 128), -(-k // 128))
        q = torch.empty(n, k, dtype=torch.float8_e4m3fn)
        for i in range(scale.shape[0]):
            for j in range(scale.shape[1]):
                block = w[i * 128 : (i + 1) * 128, j * 128 : (j + 1) * 128]
                scale[i, j] = block.abs().amax() / FP8_MAX
                q[i * 128 : (i + 1) * 128, j * 128 : (j + 1) * 128] = (block / scale[i, j]).to(torch.float8_e4m3fn)
        del blocks
        dq = q.float() * scale.repeat_interleave(128, 0)[:n].repeat_interleave(128, 1)[:, :k]
        return {"weight": q, "weight_scale_inv": scale}, dq

    qc = {"quant_method": "fp8", "activation_scheme": "dynamic", "fmt": "e4m3", "weight_block_size": [128, 128]}
    expected = _rewrite(quant_model("qwen3"), tmp_path / "fp8", convert, qc)
    got = dequantized_shards(load_model(tmp_path / "fp8", "float32", CPU))
    for name, w in expected.items():
        # re-rounding to one scale per row costs at most fp8's relative step (1/16) per element
        assert torch.all((got[name] - w).abs() <= w.abs() / 16 + 1e-6), name


@pytest.mark.parametrize("scheme_name", ["W4A16_ASYM", "W4A16", "W8A16", "FP8_DYNAMIC", "W8A8"])
def test_we_load_what_compressed_tensors_compresses(quant_model, tmp_path, scheme_name):
    from compressed_tensors.compressors.base import BaseCompressor
    from compressed_tensors.quantization import QuantizationConfig, QuantizationScheme, preset_name_to_scheme

    scheme: QuantizationScheme = preset_name_to_scheme(scheme_name, ["Linear"])
    w_args = scheme.weights
    # W8A8: int8 weights and dynamic per-token int8 activations, stored as plain int8 (llm-compressor's format)
    fmt = (
        "float-quantized"
        if w_args.type == "float"
        else ("int-quantized" if scheme_name == "W8A8" else "pack-quantized")
    )
    compressor = BaseCompressor.get_value_from_registry(fmt)
    decompressed: dict[str, torch.Tensor] = {}

    def convert(w):
        n, k = w.shape
        if w_args.strategy == "group":
            rows = w.reshape(n, k // 128, 128)
            lo, hi = rows.amin(-1).clamp(max=0), rows.amax(-1).clamp(min=0)
            if w_args.symmetric:
                scale = torch.maximum(hi, -lo) / (7.5 if w_args.num_bits == 4 else 127)
                zp = torch.zeros_like(scale, dtype=torch.int8)
            else:
                scale = (hi - lo) / 15
                zp = (torch.round(-lo / scale) - 8).clamp(-8, 7).to(torch.int8)
        else:
            scale = w.abs().amax(dim=1, keepdim=True) / (127 if w_args.type == "int" else FP8_MAX)
            zp = torch.zeros_like(scale, dtype=torch.int8)
        module = {"weight": w, "weight_scale": scale, "weight_zero_point": zp}
        tensors = compressor.compress(module, scheme)
        return tensors, compressor.decompress(dict(tensors), scheme)["weight"].float()

    config = QuantizationConfig(config_groups={"group_0": scheme}, format=fmt, ignore=["lm_head"]).model_dump()
    config.update(quant_method="compressed-tensors", quantization_status="compressed")
    expected = _rewrite(quant_model("qwen3"), tmp_path / "ct", convert, config)
    decompressed.update(expected)
    model = load_model(tmp_path / "ct", "float32", CPU)
    methods = {layer.quant_method.name for _, layer in quantized_layers(model)}
    assert methods == {{"W8A8": "int8-w8a8", "W8A16": "int8", "FP8_DYNAMIC": "fp8"}.get(scheme_name, "rtn-int4")}
    got = dequantized_shards(model)
    for name, w in decompressed.items():
        if scheme_name == "W8A16":  # int8 groups re-rounded per channel: within half a step of the row
            step = w.abs().amax(dim=1, keepdim=True) / 127
            assert torch.all((got[name] - w).abs() <= step / 2 + 1e-6), name
        else:
            assert torch.equal(got[name], w), name


def test_our_int4_layout_is_compressed_tensors_pack_order():
    from compressed_tensors.compressors.pack_quantized.helpers import pack_to_int32

    codes = torch.randint(0, 16, (4, 64), generator=torch.Generator().manual_seed(1))
    assert torch.equal(ref.pack_int4(codes), pack_to_int32((codes - 8).to(torch.int8), 4))


def _float_param_count(folder: Path) -> int:
    return sum(p.numel() for p in {id(p): p for p in load_model(folder, "float32", CPU).parameters()}.values())


def _inspect_reads_it_as_the_loader_does(folder: Path, float_folder: Path) -> None:
    """`mopt inspect` on a quantized folder: it loads, no tensor is unexpected or missing, no mixed-dtype
    advice, and the parameter count is the float model's (a packed int4 word stands for 8)."""
    from model_optimizer.model.inspect.inspector import inspect_checkpoint
    from model_optimizer.runtime.layers.quantization.summary import summarize_weights

    report = inspect_checkpoint(folder)
    problems = [f"{f.id}: {f.title}" for f in report.findings if f.severity != "ok" and not f.id.startswith("tokens.")]
    assert report.raw_check.loads and not problems, problems
    found = {f.id: f for f in report.findings}
    assert found["quant.config"].severity == "ok" and report.raw_check.quantized
    expected = _float_param_count(float_folder)
    assert report.raw_check.num_params == expected
    summary = summarize_weights(load_model(folder, "float32", CPU))
    assert (
        summary.num_params == expected and summary.quantization and summary.num_quantized_layers == 4 * 2
    )  # qkv, o, gate_up, down per layer
    assert f"{expected:,} parameters" in summary.describe()


def test_inspect_and_the_parameter_count_understand_every_layout(quant_model, tmp_path):
    float_folder = quant_model("qwen2")
    for method in ("rtn-int4", "int8", "fp8"):  # what `mopt quantize` writes (awq is rtn-int4's layout)
        out = tmp_path / method
        save_compressed_tensors(
            load_model(float_folder, "float32", CPU, quantization=method), method, 128, float_folder, out
        )
        _inspect_reads_it_as_the_loader_does(out, float_folder)

    def awq(w):
        q, scales, zeros = quantize_int4_codes(w, 128, torch.float16)
        packed = {"qweight": pack_awq(q.T.contiguous()), "qzeros": pack_awq(zeros.to(torch.int32).T.contiguous())}
        return packed | {"scales": scales.T.contiguous().to(torch.float16)}, None

    qc = {"quant_method": "awq", "bits": 4, "group_size": 128, "version": "gemm", "zero_point": True}
    _rewrite(float_folder, tmp_path / "autoawq", awq, qc)
    _inspect_reads_it_as_the_loader_does(tmp_path / "autoawq", float_folder)

    def block_fp8(w):  # one scale per 128 x 128 block, as the public Qwen3-*-FP8 checkpoints
        n, k = w.shape
        scale = w.reshape(-(-n // 128), -1, k // 128, 128).abs().amax(dim=(1, 3)) / FP8_MAX
        expanded = scale.repeat_interleave(128, 0)[:n].repeat_interleave(128, 1)[:, :k]
        return {"weight": (w / expanded).to(torch.float8_e4m3fn), "weight_scale_inv": scale}, None

    qc = {"quant_method": "fp8", "activation_scheme": "dynamic", "weight_block_size": [128, 128]}
    _rewrite(float_folder, tmp_path / "fp8-block", block_fp8, qc)
    _inspect_reads_it_as_the_loader_does(tmp_path / "fp8-block", float_folder)


def test_fix_keeps_a_quantized_checkpoint_quantized(quant_model, tmp_path):
    """--fix casts float weights to one dtype; fp8 codes and their float32 scales must stay as they are."""
    from model_optimizer.model.inspect.fix import FixOptions, fix_checkpoint
    from model_optimizer.model.inspect.inspector import inspect_checkpoint

    src = quant_model("qwen3")
    model = load_model(src, "float32", CPU, quantization="fp8")
    save_compressed_tensors(model, "fp8", 128, src, tmp_path / "fp8")
    result = fix_checkpoint(tmp_path / "fp8", tmp_path / "clean", FixOptions(dtype="bfloat16"))
    assert not result.dropped
    before, after = (
        load_file(str(tmp_path / "fp8" / "model.safetensors")),
        load_file(str(result.out / "model.safetensors")),
    )
    for name, tensor in before.items():
        if name.endswith(("weight_scale", ".weight")) and ("proj" in name):
            assert after[name].dtype == tensor.dtype and torch.equal(after[name], tensor), name
    assert after["model.embed_tokens.weight"].dtype == torch.bfloat16
    assert inspect_checkpoint(result.out).exit_code == 0
    ours = dequantized_shards(load_model(tmp_path / "fp8", "float32", CPU))
    fixed = dequantized_shards(load_model(result.out, "float32", CPU))
    assert all(torch.equal(fixed[name], w) for name, w in ours.items())


def test_writer_saves_the_checkpoint_packing_of_int4_layers_packed_for_the_kernels(quant_model, tmp_path):
    """On a GPU int4 layers hold the kernels' planes packing (repacked at load); the folder written from
    such a model is byte for byte the one written from the checkpoint packing, and reads back the same."""
    src = quant_model("qwen3")
    model = load_model(src, "float32", CPU, quantization="rtn-int4")
    save_compressed_tensors(model, "rtn-int4", 128, src, tmp_path / "sequential")
    before = dequantized_shards(model)
    for _, layer in quantized_layers(model):  # what process_weights_after_loading does on CUDA
        layer.qweight = ref.repack_int4(layer.qweight, "sequential", "planes")
        layer.quant_method.packing = "planes"
    assert all(torch.equal(before[n], w) for n, w in dequantized_shards(model).items())
    save_compressed_tensors(model, "rtn-int4", 128, src, tmp_path / "planes")
    a = load_file(str(tmp_path / "sequential" / "model.safetensors"))
    b = load_file(str(tmp_path / "planes" / "model.safetensors"))
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


@pytest.mark.parametrize("method", ["fp8", "int8"])
def test_static_activation_scales_are_taken_and_the_layers_run_as_before(quant_model, tmp_path, method):
    """llm-compressor's static schemes (FP8, static W8A8) save an `input_scale` per linear layer: the loader
    takes them (it used to refuse them as tensors that do not belong) and the layers run as the same
    checkpoint without them (weight-only, or activations quantized per token at run time); an input_scale
    on a layer that is not quantized is still refused."""
    from model_optimizer import LLM, SamplingParams

    float_folder = quant_model("qwen2")
    plain = tmp_path / "plain"
    save_compressed_tensors(
        load_model(float_folder, "float32", CPU, quantization=method), method, 128, float_folder, plain
    )
    static = tmp_path / "static"
    shutil.copytree(plain, static)
    [weights] = list(static.glob("*.safetensors"))
    state = load_file(str(weights))
    scales = {
        n[: -len("weight_scale")] + "input_scale": torch.tensor([0.02]) for n in state if n.endswith("weight_scale")
    }
    assert scales
    save_file(state | scales, str(weights))
    config = json.loads((static / "config.json").read_text())
    activations = {"num_bits": 8, "type": "float" if method == "fp8" else "int", "symmetric": True,
                   "strategy": "tensor", "dynamic": False}  # fmt: skip
    config["quantization_config"]["config_groups"]["group_0"]["input_activations"] = activations
    (static / "config.json").write_text(json.dumps(config))
    greedy = SamplingParams(temperature=0, max_tokens=6, ignore_eos=True)
    runs = [
        LLM(str(f), dtype="float32", kv_cache_memory=1 << 22).generate([[3, 4, 5, 6]], greedy) for f in (plain, static)
    ]
    assert runs[0][0].outputs[0].token_ids == runs[1][0].outputs[0].token_ids
    stray = tmp_path / "stray"
    shutil.copytree(float_folder, stray)
    state = load_file(str(stray / "model.safetensors"))
    save_file(
        state | {"model.layers.0.mlp.down_proj.input_scale": torch.tensor([0.02])}, str(stray / "model.safetensors")
    )
    with pytest.raises(ValueError, match="down_proj.input_scale' does not belong"):
        load_model(stray, "float32", CPU)
