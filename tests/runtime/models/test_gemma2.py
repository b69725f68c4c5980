"""Gemma 2 beyond the families tests (test_matches_transformers.py, test_families_engine.py): a config.json
as the releases ship it, the settings refused (Gemma 3's attention soft-capping among them), and the tools
that read a checkpoint (mopt inspect, the tuner's memory plan)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from model_optimizer import LLM, SamplingParams
from model_optimizer.model.inspect.inspector import inspect_checkpoint
from model_optimizer.model.inspect.memory_plan import plan_memory
from model_optimizer.runtime.config import EngineConfig
from tests import tiny_checkpoints as tiny
from tests.runtime.models.test_matches_transformers import hf_generate, hf_model, prompts

GREEDY = SamplingParams(temperature=0, max_tokens=24)


def _checkpoint(tiny_model, folder: Path, kind: str, **overrides) -> Path:
    """A tiny checkpoint saved by transformers from its own `kind` config class, with the shared tokenizer."""
    return tiny.checkpoint_variant(folder, kind, tiny_model("gemma2"), **overrides)


def _assert_greedy_matches_transformers(folder: Path) -> LLM:
    import torch

    llm = LLM(str(folder), dtype="float32", kv_cache_memory=1 << 24, block_size=4)
    batch = prompts(llm.runner.vocab_size, seed=3)
    reference = hf_model(folder, torch.float32)
    for prompt, out in zip(batch, llm.generate(batch, GREEDY)):
        assert out.outputs[0].token_ids == hf_generate(reference, prompt)[0]
    return llm


@pytest.mark.slow
def test_a_release_style_config_alternates_layers_and_shares_one_rope(tiny_model, tmp_path):
    """gemma-2-9b's config.json lists no layer_types and gives rope_theta flat: even layers slide, odd ones
    attend globally (Gemma2Config's default), both rotate by the one RoPE; greedy tokens are transformers'."""
    folder = _checkpoint(
        tiny_model, tmp_path / "release", "gemma2", head_dim=16, num_hidden_layers=4, query_pre_attn_scalar=16
    )
    tiny.edit_config(
        folder,
        drop=("layer_types", "rope_parameters"),
        rope_theta=20_000.0,
        sliding_window=8,
        attn_logit_softcapping=3.0,
        hidden_act="gelu_pytorch_tanh",
    )
    llm = _assert_greedy_matches_transformers(folder)
    layers = llm.runner.model.model.layers
    assert [layer.self_attn.attn.sliding_window for layer in layers] == [8, None, 8, None]
    assert {layer.self_attn.attn.softcap for layer in layers} == {3.0}
    assert all(layer.self_attn.rotary is layers[0].self_attn.rotary for layer in layers)
    assert not hasattr(layers[0].self_attn, "q_norm")


def test_gemma3_still_refuses_attention_soft_capping_which_transformers_ignores(tiny_model, tmp_path):
    """transformers' Gemma3 reads attn_logit_softcapping and never applies it (its releases set it null):
    a Gemma 3 config that sets it has no reference meaning, so it stays refused; Gemma 2's is applied."""
    import torch
    from transformers import AutoModelForCausalLM

    folder = shutil.copytree(tiny_model("gemma3"), tmp_path / "gemma3")
    ids = torch.tensor([[5, 17, 99, 3, 250, 8]])
    plain = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32).eval()
    tiny.edit_config(folder, attn_logit_softcapping=1.0)
    capped = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32).eval()
    with torch.no_grad():  # should transformers start applying it, this fails: then serve it as Gemma 2's
        assert torch.equal(plain(ids).logits, capped(ids).logits)
    with pytest.raises(ValueError, match="attn_logit_softcapping is not supported for Gemma 3"):
        LLM(str(folder), dtype="float32", kv_cache_memory=1 << 22)


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"attn_logit_softcapping": 0}, "attn_logit_softcapping must be a positive number or null, got 0"),
        ({"final_logit_softcapping": "30"}, "final_logit_softcapping must be a positive number"),
        ({"hidden_activation": "gelu"}, "hidden_activation 'gelu' is not supported for Gemma 2"),
    ],
)
def test_settings_it_cannot_serve_are_refused_by_name(tiny_model, tmp_path, changes, message):
    folder = shutil.copytree(tiny_model("gemma2"), tmp_path / "gemma2")
    tiny.edit_config(folder, **changes)
    with pytest.raises(ValueError, match=message):
        LLM(str(folder), dtype="float32", kv_cache_memory=1 << 22)


def test_inspect_and_the_memory_plan_read_it_as_the_engine_builds_it(tiny_model, tmp_path):
    """mopt inspect loads it with nothing missing and sees the tied embeddings (tied by the class's default
    where config.json has no key); the memory plan (mopt tune's cost model on a GPU) sizes its KV blocks
    and weights as the engine allocated them."""
    folder = tiny_model("gemma2")
    no_tie_key = shutil.copytree(folder, tmp_path / "no_tie_key")
    tiny.edit_config(no_tie_key, drop=("tie_word_embeddings",))
    for checkpoint in (folder, no_tie_key):
        report = inspect_checkpoint(checkpoint)
        assert report.raw_check.loads and report.raw_check.tied_embeddings and report.census.tied_embeddings
    llm = LLM(str(folder), dtype="float32", kv_cache_memory=1 << 22)
    config = json.loads((folder / "config.json").read_text())
    plan = plan_memory(config, engine=EngineConfig(dtype="float32", block_size=llm.runner.config.block_size))
    assert plan.bytes_per_block["auto"] == llm.runner.bytes_per_block()
    weights = {id(p): p for p in llm.runner.model.parameters()}.values()  # the tied lm_head once
    assert plan.weight_bytes_by_format["fp32"] == sum(p.numel() * p.element_size() for p in weights)
