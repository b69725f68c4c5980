"""Loading checkpoints: sharded files, dummy weights, and errors that name the file and the expectation."""

from __future__ import annotations

import json
import shutil

import pytest
import torch
from safetensors.torch import load_file, save_file

from model_optimizer import LLM, SamplingParams
from model_optimizer.runtime.models.loader import load_model

GREEDY = SamplingParams(temperature=0, max_tokens=8, ignore_eos=True)


def copy_model(src, dst):
    shutil.copytree(src, dst)
    return dst


def test_sharded_checkpoint_loads_identically(tiny_model, tmp_path):
    src = tiny_model("qwen3")
    from transformers import AutoModelForCausalLM

    sharded = tmp_path / "sharded"
    AutoModelForCausalLM.from_pretrained(str(src)).save_pretrained(str(sharded), max_shard_size="50KB")
    assert (sharded / "model.safetensors.index.json").is_file()
    for f in src.iterdir():
        if "token" in f.name or f.name.endswith(".jinja"):
            shutil.copy(f, sharded / f.name)
    a = LLM(str(src), kv_cache_memory=1 << 22).generate([[4, 5, 6]], GREEDY)[0].outputs[0].token_ids
    b = LLM(str(sharded), kv_cache_memory=1 << 22).generate([[4, 5, 6]], GREEDY)[0].outputs[0].token_ids
    assert a == b


def test_dummy_weights_need_only_the_config(tiny_model, tmp_path):
    folder = tmp_path / "config-only"
    folder.mkdir()
    shutil.copy(tiny_model("llama3") / "config.json", folder / "config.json")
    model = load_model(folder, "bfloat16", torch.device("cpu"), load_format="dummy")
    assert next(model.parameters()).dtype == torch.bfloat16
    assert all(torch.isfinite(p).all() for p in model.parameters())


def test_unknown_architecture_names_the_supported_ones(tiny_model, tmp_path):
    folder = copy_model(tiny_model("qwen3"), tmp_path / "m")
    config = json.loads((folder / "config.json").read_text())
    config["architectures"] = ["GPT2LMHeadModel"]
    (folder / "config.json").write_text(json.dumps(config))
    with pytest.raises(ValueError, match="GPT2LMHeadModel.*not supported.*Qwen3ForCausalLM"):
        LLM(str(folder))


def test_a_known_family_not_yet_built_says_why_and_lists_the_families(tiny_model, tmp_path, monkeypatch):
    from model_optimizer.runtime.models import registry

    arch, why = "Qwen3NextForCausalLM", "its linear attention is not built yet"  # NOT_YET is empty today
    monkeypatch.setitem(registry.NOT_YET, arch, why)
    folder = copy_model(tiny_model("qwen3"), tmp_path / "m")
    config = json.loads((folder / "config.json").read_text())
    (folder / "config.json").write_text(json.dumps(config | {"architectures": [arch]}))
    with pytest.raises(ValueError, match=f"{arch}.*not supported.*{why}") as info:
        LLM(str(folder))
    families = (
        "Qwen3-MoE (Qwen3MoeForCausalLM)",
        "Mixtral",
        "GLM-4 (Glm4ForCausalLM)",
        "GLM-4.5/4.6/4.7 (MoE) (Glm4MoeForCausalLM)",
        "GLM-4.7-Flash (Glm4MoeLiteForCausalLM)",
        "Gemma 3 (text)",
        "DeepSeek-V2/V3",
    )
    for family in families:
        assert family in str(info.value)


def test_missing_folder_and_files(tmp_path):
    with pytest.raises(FileNotFoundError, match="does not exist"):
        LLM(str(tmp_path / "nope"))
    (tmp_path / "empty").mkdir()
    with pytest.raises(FileNotFoundError, match="config.json"):
        load_model(tmp_path / "empty", "auto", torch.device("cpu"))


def test_shape_mismatch_names_file_tensor_and_shapes(tiny_model, tmp_path):
    folder = copy_model(tiny_model("qwen3"), tmp_path / "m")
    tensors = load_file(str(folder / "model.safetensors"))
    name = "model.layers.0.self_attn.k_proj.weight"
    tensors[name] = tensors[name][:-1]
    save_file(tensors, str(folder / "model.safetensors"))
    with pytest.raises(
        ValueError, match=r"model.safetensors: tensor 'model.layers.0.self_attn.k_proj.weight'.*expected shape"
    ):
        load_model(folder, "auto", torch.device("cpu"))


def test_missing_tensor_is_reported(tiny_model, tmp_path):
    folder = copy_model(tiny_model("qwen3"), tmp_path / "m")
    tensors = load_file(str(folder / "model.safetensors"))
    del tensors["model.layers.1.mlp.up_proj.weight"]
    save_file(tensors, str(folder / "model.safetensors"))
    with pytest.raises(ValueError, match=r"lacks weights for: model.layers.1.mlp.gate_up_proj.weight\[up\]"):
        load_model(folder, "auto", torch.device("cpu"))


def test_kv_cache_scales_of_a_checkpoint_are_loaded_and_used(tiny_model, tmp_path):
    """llm-compressor's fp8 KV-cache checkpoints carry per-tensor `self_attn.k_scale` / `v_scale` (older
    exports `k_proj.output_scale`): they go to the attention layers' scales (the cache stores x / scale),
    where an unknown tensor used to fail the load; a per-head scale is refused, naming the tensor."""
    folder = copy_model(tiny_model("qwen3"), tmp_path / "scaled")
    tensors = load_file(folder / "model.safetensors")
    tensors["model.layers.0.self_attn.k_scale"] = torch.tensor(0.5)
    tensors["model.layers.0.self_attn.v_scale"] = torch.tensor([0.25])
    tensors["model.layers.1.self_attn.k_proj.output_scale"] = torch.tensor(2.0)
    save_file(tensors, folder / "model.safetensors")
    llm = LLM(str(folder), kv_cache_dtype="fp8", dtype="float32", kv_cache_memory=1 << 22)
    layers = llm.runner.model.model.layers
    scales = [(float(layer.self_attn.attn.k_scale), float(layer.self_attn.attn.v_scale)) for layer in layers[:2]]
    assert scales == [(0.5, 0.25), (2.0, 1.0)]
    plain = LLM(str(folder), kv_cache_dtype="fp8", dtype="float32", kv_cache_memory=1 << 22)
    for layer in plain.runner.model.model.layers:  # the same model with every scale at 1.0
        layer.self_attn.attn.k_scale.fill_(1.0)
        layer.self_attn.attn.v_scale.fill_(1.0)
    out = llm.generate([list(range(40, 60))], GREEDY)[0].outputs[0]
    cache, reference = llm.runner.kv_caches[0], plain.runner.kv_caches[0]
    plain.generate([list(range(40, 60))], GREEDY)
    assert len(out.token_ids) == 8 and not torch.equal(cache.float(), reference.float())  # the scales were used
    tensors["model.layers.0.self_attn.k_scale"] = torch.ones(2)
    save_file(tensors, folder / "model.safetensors")
    with pytest.raises(ValueError, match="model.layers.0.self_attn.k_scale.*one positive number"):
        LLM(str(folder), kv_cache_dtype="fp8", kv_cache_memory=1 << 22)
