"""Folders the compressed-tensors package writes itself (ct_reference.py: ModelCompressor, as llm-compressor
saves), read by our loader: the weights it decompresses, the layers its `targets` and `ignore` name, and
what we cannot run refused in words rather than at the first tensor we do not expect."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file, save_file

from model_optimizer.runtime.layers.quantization.attach import quantized_layers
from model_optimizer.runtime.models.loader import load_model
from tests import tiny_checkpoints as tiny
from tests.runtime.layers.quantization.ct_reference import (
    engine_logits,
    scheme,
    transformers_logits,
    write_reference,
)
from tests.runtime.layers.quantization.shards import dequantized_shards

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning", "ignore::DeprecationWarning")
CPU = torch.device("cpu")


def _config(groups: dict, ignore: list[str] | None = None, **extra):
    from compressed_tensors.quantization import QuantizationConfig

    return QuantizationConfig(config_groups=groups, ignore=["lm_head"] if ignore is None else ignore, **extra)


def _decompressed(folder: Path) -> dict[str, torch.Tensor]:
    """Module name -> the float weight compressed-tensors decompresses the folder's tensors to (in transformers)."""
    from transformers import AutoModelForCausalLM, CompressedTensorsConfig

    hf = AutoModelForCausalLM.from_pretrained(
        str(folder), dtype=torch.float32, quantization_config=CompressedTensorsConfig(run_compressed=False)
    )
    return {n: m.weight.detach().float() for n, m in hf.named_modules() if isinstance(m, torch.nn.Linear)}


def _edit_config(folder: Path, edit) -> Path:
    config = json.loads((folder / "config.json").read_text())
    edit(config["quantization_config"])
    (folder / "config.json").write_text(json.dumps(config))
    return folder


@pytest.mark.parametrize("preset", ["W4A16", "W4A16_ASYM", "W8A8", "FP8", "FP8_DYNAMIC", "FP8_BLOCK", "W8A16"])
def test_presets_load_to_the_weights_compressed_tensors_decompresses(quant_model, tmp_path, preset):
    """Exact, but where our kernels read another layout: FP8_BLOCK's 128 x 128 blocks and W8A16's int8
    groups of 128 are re-rounded with one scale per output channel (at most half a step of that scale)."""
    folder = write_reference(quant_model("qwen3"), tmp_path / preset, _config({"group_0": scheme(preset)}))
    ours, theirs = dequantized_shards(load_model(folder, "float32", CPU)), _decompressed(folder)
    assert len(ours) == 14 and ours.keys() <= theirs.keys()
    for name in ours:
        w = theirs[name]
        row_max = ours[name].abs().amax(dim=1, keepdim=True)
        if preset == "FP8_BLOCK":  # e4m3 keeps 3 mantissa bits: half a step is 1/16 of the value
            assert torch.all((ours[name] - w).abs() <= w.abs() / 16 + row_max / 448 / 512), name
        elif preset == "W8A16":
            assert torch.all((ours[name] - w).abs() <= row_max / 127 / 2 + 1e-6), name
        else:
            assert torch.equal(ours[name], w), name


def test_one_scheme_in_two_groups_of_targets_loads(quant_model, tmp_path):
    """llm-compressor writes one config group per distinct targets, even with the same weights: attention and
    MLP as two W4A16 groups was refused as "2 weight schemes"; it is one scheme, and loads as such."""
    groups = {"attn": scheme("W4A16", ["re:.*self_attn.*"]), "mlp": scheme("W4A16", ["re:.*mlp.*"])}
    folder = write_reference(quant_model("qwen3"), tmp_path / "two", _config(groups))
    assert len(json.loads((folder / "config.json").read_text())["quantization_config"]["config_groups"]) == 2
    torch.testing.assert_close(engine_logits(folder), transformers_logits(folder), atol=1e-4, rtol=1e-4)


def test_layers_outside_the_targets_stay_float(quant_model, tmp_path):
    """A scheme whose `targets` name only the MLP leaves attention in float, though `ignore` lists only
    lm_head (as a writer that does not spell out every untouched layer has it): the loader expected packed
    attention weights and failed at the first float one."""
    folder = write_reference(quant_model("qwen3"), tmp_path / "mlp", _config({"g": scheme("W4A16", ["re:.*mlp.*"])}))
    _edit_config(folder, lambda qc: qc.update(ignore=["lm_head"]))
    model = load_model(folder, "float32", CPU)
    assert {name.rsplit(".", 1)[1] for name, _ in quantized_layers(model)} == {"gate_up_proj", "down_proj"}
    torch.testing.assert_close(engine_logits(folder), transformers_logits(folder), atol=1e-4, rtol=1e-4)


def test_a_fused_layer_quantized_in_part_is_refused_in_words(quant_model, tmp_path):
    """q, k and v are one layer here: k_proj left in float beside packed q_proj and v_proj cannot load."""
    config = _config({"g": scheme("W4A16")}, ignore=["lm_head", "model.layers.0.self_attn.k_proj"])
    folder = write_reference(quant_model("qwen3"), tmp_path / "k", config)
    with pytest.raises(ValueError, match=r"k_proj.*unquantized.*q_proj.*one layer") as info:
        load_model(folder, "float32", CPU)
    assert "does not belong" not in str(info.value)


def _sparse(qc: dict) -> None:
    qc["sparsity_config"] = {"format": "sparse-24-bitmask", "sparsity_structure": "2:4", "targets": ["Linear"]}


def _dynamic_act_order(qc: dict) -> None:
    qc["config_groups"]["group_0"]["weights"]["actorder"] = "dynamic"  # compressed-tensors' alias of "group"


@pytest.mark.parametrize(
    ("edit", "says"),
    [(_sparse, "sparsity_config.*sparse-24-bitmask"), (_dynamic_act_order, "actorder 'dynamic'")],
)
def test_config_fields_that_change_the_weights_are_refused(quant_model, tmp_path, edit, says):
    """A compressed sparsity format stores the weights in pieces, and act-order by its alias "dynamic" needs
    weight_g_idx: both were read as plain packed weights, the fields ignored."""
    folder = write_reference(quant_model("qwen3"), tmp_path / "w4", _config({"group_0": scheme("W4A16")}))
    with pytest.raises(ValueError, match=says):
        load_model(_edit_config(folder, edit), "float32", CPU)


def _hadamard_on_down_proj(model: torch.nn.Module) -> None:
    """SpinQuant's R4: down_proj's input rotated at run time, its weight by the inverse."""
    from compressed_tensors.transform import TransformArgs, TransformConfig, TransformScheme, apply_transform_config

    args = [
        TransformArgs(targets=["re:.*down_proj$"], location="input"),
        TransformArgs(targets=["re:.*down_proj$"], location="weight_input", inverse=True),
    ]
    config = TransformConfig(config_groups={"R4": TransformScheme(type="hadamard", apply=args)})
    apply_transform_config(model, config)
    model.transform_config = config


def test_an_online_rotation_is_refused_in_words(quant_model, tmp_path):
    config = _config({"group_0": scheme("W8A16")})
    folder = write_reference(quant_model("qwen3"), tmp_path / "r4", config, prepare=_hadamard_on_down_proj)
    with pytest.raises(ValueError, match="transform_config.*at run time"):
        load_model(folder, "float32", CPU)


def test_weights_saved_uncompressed_are_refused_in_words(quant_model, tmp_path):
    """llm-compressor's save_compressed=False: float weights beside scales and zero points (format "dense")."""
    config = _config({"group_0": scheme("FP8_DYNAMIC")})
    folder = write_reference(
        quant_model("qwen3"), tmp_path / "dense", config, compress=False, quantization_format="dense"
    )
    with pytest.raises(ValueError, match="format 'dense'.*not compressed"):
        load_model(folder, "float32", CPU)


@pytest.mark.parametrize("tied", [True, False])
def test_a_quantized_lm_head_is_refused_in_words(tmp_path, tied):
    """The output head loads only unquantized: a scheme that covers it (no `ignore` for lm_head, tied
    embeddings or not) failed on 'lm_head.weight_scale' as a tensor that does not belong."""
    config = tiny.tiny_config("qwen3", hidden_size=128, intermediate_size=256, head_dim=32, tie_word_embeddings=tied)
    src = tiny.build_checkpoint(tmp_path / "float", config)
    folder = write_reference(src, tmp_path / "w8a8", _config({"group_0": scheme("W8A8")}, ignore=[]))
    with pytest.raises(ValueError, match="'lm_head' is quantized.*loads it unquantized"):
        load_model(folder, "float32", CPU)


def test_quantized_experts_are_refused_in_words(tmp_path):
    """llm-compressor's Qwen3-MoE W4A16 folders quantize every expert (ignore: routers and lm_head); our
    experts load only unquantized. Written per expert, as transformers 4 models (one Linear per expert) save."""
    from compressed_tensors.compressors.base import BaseCompressor
    from compressed_tensors.quantization.utils import calculate_qparams

    moe = tiny.tiny_config("qwen3_moe", hidden_size=128, intermediate_size=256, moe_intermediate_size=128,
                           num_experts=4, num_experts_per_tok=2, head_dim=32)  # fmt: skip
    src = tiny.build_checkpoint(tmp_path / "float", moe)
    w4a16 = scheme("W4A16")
    folder = write_reference(src, tmp_path / "w4", _config({"group_0": w4a16}, ignore=["lm_head", "re:.*mlp.gate$"]))
    [weights] = folder.glob("*.safetensors")
    state, packer = load_file(str(weights)), BaseCompressor.get_value_from_registry("pack-quantized")
    for name in [n for n in state if ".experts." in n]:
        w = state.pop(name)
        groups = w.reshape(w.shape[0], -1, 128)
        scale, _ = calculate_qparams(groups.amin(-1), groups.amax(-1), w4a16.weights)
        packed = packer.compress({"weight": w, "weight_scale": scale}, w4a16)
        state.update({name.removesuffix("weight") + key: t for key, t in packed.items()})
    save_file(state, str(weights))
    with pytest.raises(ValueError, match=r"'model\.layers\.0\.mlp\.experts\.0\.\w+_proj' is quantized"):
        load_model(folder, "float32", CPU)
