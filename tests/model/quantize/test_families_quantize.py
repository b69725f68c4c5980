"""`mopt quantize`'s writer on the mixture-of-experts, GLM-4, Phi-3, Gemma 3, Gemma 2 and DeepSeek families: the folder
keeps the original tensor names (per-expert tensors, Mixtral's router, GLM-4's fused gate_up, Phi-3's fused qkv
and gate_up, gpt-oss's stacked experts with their biases, its router and sinks), experts,
routers and DeepSeek's latent projections stay in float, compressed-tensors accepts the config, and
the engine reads it back. gpt-oss's MXFP4 layout: test_gpt_oss_quantize.py."""

from __future__ import annotations

import json

import pytest
import torch
from safetensors.torch import load_file

from model_optimizer import LLM, SamplingParams
from model_optimizer.cli.main import main
from model_optimizer.model.quantize.writer import save_compressed_tensors
from model_optimizer.runtime.layers.quantization.attach import quantized_layers
from model_optimizer.runtime.models.loader import load_model

CPU = torch.device("cpu")


@pytest.mark.parametrize(
    "name",
    ["qwen3_moe", "mixtral", "glm4", "glm4_moe", "phi3", "gemma3", "gemma2", "deepseek_v2", "deepseek_v3", "gpt_oss"],
)
def test_int8_folder_keeps_the_checkpoint_names_and_loads_back(tiny_model, tmp_path, name):
    from compressed_tensors.quantization import QuantizationConfig

    src = tiny_model(name)
    original = load_file(str(src / "model.safetensors"))
    model = load_model(src, "float32", CPU, quantization="int8")
    save_compressed_tensors(model, "int8", 128, src, tmp_path / "out")
    written = load_file(str(tmp_path / "out" / "model.safetensors"))
    # every original tensor is there under its own name, or as the int8 layout of that linear
    quantized = {n.removesuffix(".weight_packed") for n in written if n.endswith(".weight_packed")}
    for key, tensor in original.items():
        if key.removesuffix(".weight") in quantized:
            continue
        assert key in written, key
        assert torch.equal(written[key], tensor), key  # experts, routers, norms, embeddings: untouched
    assert not any("w13_weight" in n or "w2_weight" in n for n in written)
    config = json.loads((tmp_path / "out" / "config.json").read_text())["quantization_config"]
    QuantizationConfig.model_validate(config)  # the library accepts the block
    router = "router" if name == "gpt_oss" else "gate"  # its checkpoint's name
    moe = (
        ["re:.*\\.experts(\\..*)?$", f"re:.*\\.{router}$"]
        if name in ("qwen3_moe", "mixtral", "glm4_moe", "gpt_oss") or "deepseek" in name
        else []
    )
    mla = ["re:.*\\.q_a_proj$", "re:.*\\.kv_a_proj_with_mqa$", "re:.*\\.kv_b_proj$"] if "deepseek" in name else []
    assert config["ignore"] == ["lm_head"] + moe + mla
    if "deepseek" in name:  # latent projections and routers in float; queries, o_proj and dense MLPs rounded
        assert not any(k in n for n in quantized for k in ("q_a_proj", "kv_a_proj", "kv_b_proj", "gate."))
        assert {"q_proj", "q_b_proj"} & {n.rsplit(".", 1)[-1] for n in quantized}
        assert any(n.endswith("o_proj") for n in quantized) and any("shared_experts" in n for n in quantized)
    reloaded = load_model(tmp_path / "out", "float32", CPU)
    assert len(quantized_layers(reloaded)) == len(quantized_layers(model)) > 0
    for (a, x), (b, y) in zip(quantized_layers(reloaded), quantized_layers(model)):
        assert a == b and torch.equal(x.quant_method.dequantize(x), y.quant_method.dequantize(y))
    llm = LLM(str(tmp_path / "out"), dtype="float32", kv_cache_memory=1 << 22)
    assert len(llm.generate([[5, 6, 7]], SamplingParams(max_tokens=4, ignore_eos=True))[0].outputs[0].token_ids) == 4


@pytest.mark.parametrize(("name", "arch"), [("qwen3_moe", "Qwen3MoeForCausalLM"), ("gpt_oss", "GptOssForCausalLM")])
def test_awq_refuses_a_mixture_of_experts_with_a_clear_message(tiny_model, tmp_path, capsys, name, arch):
    code = main(
        ["quantize", str(tiny_model(name)), "--method", "awq", "--output", str(tmp_path / "q")]
        + ["--num-calib-samples", "2", "--calib-seq-len", "32", "--num-eval-samples", "2", "--eval-seq-len", "32"]
    )
    assert code != 0
    err = capsys.readouterr().err
    assert f"awq does not support {arch} yet" in err and "rtn-int4, int8 or fp8" in err
    assert not (tmp_path / "q").exists()
