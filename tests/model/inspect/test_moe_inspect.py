"""`mopt inspect` on mixtures of experts: the census by expert, active against total parameters, and the
memory plan's figures as the engine builds the model (sliced or whole experts per GPU)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from model_optimizer import LLM
from model_optimizer.cli.main import main
from model_optimizer.model.inspect.inspector import inspect_checkpoint
from model_optimizer.model.inspect.memory_plan import plan_memory
from model_optimizer.model.inspect.plan_shape import model_shape
from model_optimizer.runtime.config import EngineConfig
from tests.model.inspect.broken import edit_tensors

CONFIGS = Path(__file__).resolve().parents[3] / "benchmarks" / "configs"


def _config(folder) -> dict:
    return json.loads((Path(folder) / "config.json").read_text())


@pytest.mark.parametrize(("name", "experts", "layers", "top_k"), [("qwen3_moe", 8, 2, 2), ("mixtral", 4, 2, 2)])
def test_census_counts_experts_and_active_parameters(tiny_model, name, experts, layers, top_k):
    report = inspect_checkpoint(tiny_model(name))
    census = report.census
    assert {"experts", "router"} <= set(census.by_kind) and report.raw_check.loads
    moe = census.experts
    assert (moe.num_experts, moe.num_moe_layers, moe.experts_per_token) == (experts, layers, top_k)
    assert moe.expert_params == census.by_kind["experts"].params == experts * layers * moe.params_per_expert
    assert moe.active_params == census.total.params - moe.expert_params * (experts - top_k) // experts
    assert moe.odd_experts == []
    # the plan builds the engine's model: the same active count, and the engine holds every expert
    plan = plan_memory(_config(tiny_model(name)), engine=EngineConfig(dtype="float32"))
    assert plan.num_active_params == moe.active_params
    llm = LLM(str(tiny_model(name)), dtype="float32", kv_cache_memory=1 << 22)
    assert plan.num_params == sum(p.numel() for p in llm.runner.model.parameters()) == census.total.params


def test_a_missing_expert_tensor_is_named(fresh):
    folder = fresh("qwen3_moe")
    edit_tensors(folder, lambda sd: {k: v for k, v in sd.items() if k != "model.layers.2.mlp.experts.3.up_proj.weight"})
    report = inspect_checkpoint(folder)
    assert report.exit_code == 1
    assert report.raw_check.missing == ["model.layers.2.mlp.experts.w13_weight[up:3]"]
    assert report.census.experts.odd_experts == ["layer 2 expert 3: 4,096 params"]  # 2 of its 3 tensors


def test_plan_of_qwen3_30b_a3b_active_and_per_gpu():
    config = _config(CONFIGS / "qwen3-30b-a3b")
    one = plan_memory(config)
    assert 30.4e9 < one.num_params < 30.6e9  # the published 30.5 B
    assert 3.0e9 < one.num_active_params < 3.5e9  # and 3.3 B active
    sliced = model_shape(config, "bfloat16", 2)
    whole = model_shape(config, "bfloat16", 2, expert_parallel=True)
    assert sliced.expert_params == whole.expert_params == model_shape(config).expert_params // 2
    assert (sliced.moe_intermediate_size, whole.moe_intermediate_size) == (384, 768)
    assert whole.num_active_params == sliced.num_active_params
    ep = plan_memory(config, engine=EngineConfig(tensor_parallel_size=2, enable_expert_parallel=True))
    assert ep.expert_parallel and ep.num_params == sliced.num_params


def test_moe_activations_count_each_tokens_experts():
    """A prefill of 8192 tokens routes 65,536 (token, expert) pairs: their rows outweigh attention's."""
    config = _config(CONFIGS / "qwen3-30b-a3b")
    plan = plan_memory(config, engine=EngineConfig(max_num_batched_tokens=8192, max_model_len=8192))
    pairs_bytes = 8192 * 8 * (768 + 2048) * 2
    assert plan.activation_bytes["auto"] > pairs_bytes
    assert plan.activation_bytes["auto"] < 2 * pairs_bytes


def test_inspect_cli_prints_the_experts(tiny_model, capsys):
    assert main(["inspect", str(tiny_model("qwen3_moe")), "--gpu", "H200"]) == 0
    out = capsys.readouterr().out
    assert "experts: 8 in each of 2 layers, 2 per token" in out
    assert "active per token (mixture of experts)" in out
