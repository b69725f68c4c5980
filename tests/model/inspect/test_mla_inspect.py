"""`mopt inspect` on DeepSeek models: the census by expert, and the memory plan's KV bytes per token from the
latent row, against what a full-head cache would take, as the engine sizes its cache."""

from __future__ import annotations

import json
from pathlib import Path

from model_optimizer import LLM
from model_optimizer.cli.main import main
from model_optimizer.model.inspect.inspector import inspect_checkpoint
from model_optimizer.model.inspect.memory_plan import plan_memory
from model_optimizer.runtime.config import EngineConfig

CONFIGS = Path(__file__).resolve().parents[3] / "benchmarks" / "configs"


def _config(folder) -> dict:
    return json.loads((Path(folder) / "config.json").read_text())


def test_census_and_plan_agree_with_the_engine(tiny_model):
    folder = tiny_model("deepseek_v3")
    report = inspect_checkpoint(folder)
    census = report.census
    assert report.raw_check.loads and report.exit_code == 0
    assert {"experts", "router", "attention", "mlp"} <= set(census.by_kind)
    moe = census.experts
    assert (moe.num_experts, moe.num_moe_layers, moe.experts_per_token) == (8, 2, 2)  # layer 0 is dense
    plan = plan_memory(_config(folder), engine=EngineConfig(dtype="float32", block_size=4))
    assert plan.num_active_params == moe.active_params
    llm = LLM(str(folder), dtype="float32", kv_cache_memory=1 << 22, block_size=4)
    assert plan.num_params == sum(p.numel() for p in llm.runner.model.parameters()) == census.total.params
    assert plan.bytes_per_block["auto"] == llm.runner.bytes_per_block() == 3 * 4 * (32 + 8) * 4
    assert plan.full_head_kv_bytes_per_token["auto"] == 3 * 4 * (24 + 16) * 4  # 4 heads' keys and values


def test_plan_of_deepseek_v2_lite_latent_against_full_heads():
    config = _config(CONFIGS / "deepseek-v2-lite")
    plan = plan_memory(config)
    assert 15.6e9 < plan.num_params < 15.8e9  # the published 15.7 B
    assert 2.4e9 < plan.num_active_params < 2.7e9  # 2.4 B active without the embeddings
    assert plan.kv_bytes_per_token == {"auto": 27 * 576 * 2, "fp8": 27 * 576}
    assert plan.full_head_kv_bytes_per_token["auto"] == 27 * 16 * (192 + 128) * 2  # 8.9x the latent
    assert any("8.9x smaller KV cache" in note for note in plan.notes)
    two = plan_memory(config, engine=EngineConfig(tensor_parallel_size=2))
    assert two.kv_bytes_per_token == plan.kv_bytes_per_token  # every GPU holds the whole latent
    assert two.full_head_kv_bytes_per_token["auto"] == plan.full_head_kv_bytes_per_token["auto"] // 2


def test_plan_of_deepseek_v3_shapes():
    plan = plan_memory(_config(CONFIGS / "deepseek-v3"))
    assert 670e9 < plan.num_params < 672e9 and 37e9 < plan.num_active_params < 38e9  # 671 B, 37 B active
    assert plan.kv_bytes_per_token["auto"] == 61 * 576 * 2


def test_inspect_cli_prints_the_latent_cache(tiny_model, capsys):
    assert main(["inspect", str(tiny_model("deepseek_v2")), "--gpu", "H200"]) == 0
    out = capsys.readouterr().out
    assert "latent; full heads would take" in out
    assert "multi-head latent attention: 40 cached values per token and layer" in out
