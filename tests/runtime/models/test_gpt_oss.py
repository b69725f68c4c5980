"""gpt-oss (models/gpt_oss.py) beyond test_matches_transformers.py's default settings and
test_families_engine.py's prefix hits, chunks and preemption: greedy tokens and logprobs equal
transformers' GptOssForCausalLM (float32, CPU) on an MXFP4 checkpoint (dequantized at load, against
transformers on the same values) and on a release-style config.json; the MXFP4 decoding against transformers' own; the tools that read a checkpoint."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import torch

from model_optimizer import LLM, SamplingParams
from model_optimizer.runtime.models.gpt_oss import dequantize_mxfp4, quantize_mxfp4
from tests import tiny_checkpoints as tiny
from tests.runtime.models.test_matches_transformers import NUM_NEW as HF_NEW
from tests.runtime.models.test_matches_transformers import assert_matches_transformers, prompts

LOGPROBS = SamplingParams(temperature=0, max_tokens=HF_NEW, logprobs=5)  # as many tokens as hf_generate's


@pytest.fixture(scope="module")
def mxfp4(tiny_model, tmp_path_factory) -> tuple[Path, Path]:
    """(the MXFP4 folder, the float folder of the values its blocks mean, dequantized by transformers)."""
    root = tmp_path_factory.mktemp("gpt_oss_mxfp4")
    out = tiny.build_mxfp4_checkpoint(tiny_model("gpt_oss"), root / "mxfp4", reference_dir=root / "dequantized")
    return out, root / "dequantized"


def test_mxfp4_checkpoint_is_dequantized_at_load_and_matches_transformers(mxfp4):
    folder, dequantized = mxfp4
    config = json.loads((folder / "config.json").read_text())
    assert config["quantization_config"]["quant_method"] == "mxfp4"
    llm = LLM(str(folder), dtype="float32", kv_cache_memory=1 << 24, block_size=16)
    batch = prompts(llm.runner.vocab_size, seed=5)
    assert_matches_transformers(dequantized, batch, llm.generate(batch, LOGPROBS))
    experts = llm.runner.model.model.layers[0].mlp.experts
    assert experts.w13_weight.dtype == torch.float32  # dequantized, not run natively


def test_transformers_reads_the_mxfp4_folder_as_the_values_we_load(mxfp4):
    """transformers itself (dequantizing on the CPU) gives the logits of the float reference folder."""
    from transformers import AutoModelForCausalLM, Mxfp4Config

    folder, dequantized = mxfp4
    ids = torch.tensor([[5, 17, 99, 3, 250, 8, 41, 7, 300, 12]])
    ours = AutoModelForCausalLM.from_pretrained(str(dequantized), dtype=torch.float32).eval()
    try:
        theirs = AutoModelForCausalLM.from_pretrained(
            str(folder), dtype=torch.float32, quantization_config=Mxfp4Config(dequantize=True)
        ).eval()
    except Exception as exc:  # noqa: BLE001 - an environment without what its MXFP4 loader needs
        pytest.skip(f"transformers cannot load MXFP4 here: {exc}")
    with torch.no_grad():
        assert torch.allclose(ours(ids).logits, theirs(ids).logits, atol=1e-5)


def test_mxfp4_round_trip_and_transformers_decoding():
    from transformers.integrations.mxfp4 import convert_moe_packed_tensors

    gen = torch.Generator().manual_seed(0)
    weight = torch.randn(3, 40, 96, generator=gen) * 0.1  # (experts, out, in)
    blocks, scales = quantize_mxfp4(weight)
    assert blocks.shape == (3, 40, 3, 16) and blocks.dtype == torch.uint8 and scales.shape == (3, 40, 3)
    ours = dequantize_mxfp4(blocks, scales, torch.float32)
    theirs = convert_moe_packed_tensors(blocks, scales, dtype=torch.float32)  # transposed: (experts, in, out)
    assert torch.equal(ours, theirs.transpose(1, 2))
    assert torch.equal(dequantize_mxfp4(blocks, scales, torch.bfloat16), ours.bfloat16())
    # e2m1 with a power-of-two scale per 32: within a quarter of each group's scale step of the original
    assert (ours - weight).abs().max() <= weight.abs().amax() / 4
    assert torch.equal(quantize_mxfp4(ours)[0], blocks)  # exact values quantize to themselves


def test_release_style_config(tiny_model, tmp_path):
    """gpt-oss-20b's config.json spells rope as `rope_scaling` beside `rope_theta`, lists layer_types, has no
    swiglu_alpha; greedy tokens and logprobs are transformers'."""
    folder = Path(shutil.copytree(tiny_model("gpt_oss"), tmp_path / "release"))
    path = folder / "config.json"
    config = json.loads(path.read_text())
    rope = config.pop("rope_parameters")
    config["rope_theta"] = rope.pop("rope_theta")
    config["rope_scaling"] = rope
    config.pop("swiglu_alpha", None)
    path.write_text(json.dumps(config))
    llm = LLM(str(folder), dtype="float32", kv_cache_memory=1 << 24, block_size=16)
    layers = llm.runner.model.model.layers
    assert [layer.self_attn.attn.sliding_window for layer in layers] == [8, None, 8]
    assert layers[0].mlp.experts.activation.limit == 1.5 and layers[0].mlp.experts.activation.alpha == 1.702
    batch = prompts(llm.runner.vocab_size, seed=6)
    assert_matches_transformers(folder, batch, llm.generate(batch, LOGPROBS))


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"swiglu_limit": 0}, "swiglu_limit must be a positive number"),
        ({"layer_types": ["full_attention"]}, "layer_types must list 3"),
        ({"sliding_window": -4}, "sliding_window"),
    ],
)
def test_settings_it_cannot_serve_are_refused_by_name(tiny_model, tmp_path, changes, message):
    folder = Path(shutil.copytree(tiny_model("gpt_oss"), tmp_path / "bad"))
    path = folder / "config.json"
    path.write_text(json.dumps(json.loads(path.read_text()) | changes))
    with pytest.raises(ValueError, match=message):
        LLM(str(folder), dtype="float32", kv_cache_memory=1 << 22)


def test_inspect_and_the_memory_plan_read_it_as_the_engine_builds_it(tiny_model, mxfp4):
    from model_optimizer.model.inspect.inspector import inspect_checkpoint
    from model_optimizer.model.inspect.memory_plan import plan_memory
    from model_optimizer.runtime.config import EngineConfig

    for folder in (tiny_model("gpt_oss"), mxfp4[0]):
        report = inspect_checkpoint(folder)
        assert report.raw_check.loads, folder
        said = [f.title for f in report.findings if f.id == "quant.config"]
        assert said == ([] if folder != mxfp4[0] else [next(m for m in said if "dequantized" in m)])
        llm = LLM(str(folder), dtype="float32", kv_cache_memory=1 << 22)
        config = json.loads((folder / "config.json").read_text())
        plan = plan_memory(config, engine=EngineConfig(dtype="float32", block_size=llm.runner.config.block_size))
        assert plan.bytes_per_block["auto"] == llm.runner.bytes_per_block()
        weights = {id(p): p for p in llm.runner.model.parameters()}.values()
        assert plan.weight_bytes_by_format["fp32"] == sum(p.numel() * p.element_size() for p in weights)
