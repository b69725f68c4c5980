"""Offload advice in the memory plan: the fewest layers whose offload lets one sequence fit, by the
engine's rules (two layer slots stay on the GPU), and the copy time each step then pays."""

from __future__ import annotations

import json
from pathlib import Path

from model_optimizer.cli.main import main
from model_optimizer.model.inspect.memory_plan import gpu_memory, plan_memory
from model_optimizer.model.inspect.offload_plan import (
    DEFAULT_H2D_GBPS,
    host_to_device_gbps,
    offload_advice,
    offload_rows,
)
from model_optimizer.runtime.config import EngineConfig

CONFIGS = Path(__file__).resolve().parents[3] / "benchmarks" / "configs"
ENGINE = EngineConfig(max_model_len=8192)


def _config(name: str) -> dict:
    return json.loads((CONFIGS / name / "config.json").read_text())


def test_link_bandwidth_from_the_datasheet_or_a_conservative_default():
    gbps, source = host_to_device_gbps("NVIDIA H200")
    assert 45 < gbps < 55 and "PCIe gen5 x16" in source  # 80% of 63 GB/s
    assert host_to_device_gbps("Some Unknown GPU") == (DEFAULT_H2D_GBPS, "default (no PCIe link in the datasheet)")


def test_fewest_layers_that_free_the_missing_bytes_beyond_two_slots():
    advice = offload_advice("bf16", missing_bytes=25, one_layer=10, num_layers=8, h2d=(20.0, "given"))
    assert advice.num_layers == 5  # 5 layers leave, 2 slots come: 30 >= 25 bytes freed; 4 free only 20
    assert advice.offloaded_bytes == 50 and advice.ms_per_step == 50 / 20e9 * 1e3
    assert offload_advice("bf16", 1000, 10, 8, (20.0, "given")).cpu_offload_gb is None  # not even all layers


def test_seventy_b_on_one_h200_gets_advice_that_makes_one_sequence_fit():
    config = _config("llama-3.1-70b")
    plan = plan_memory(config, gpu_memory("H200"), ENGINE, seq_len=4096)
    assert plan.row("bf16").num_sequences == 0 and plan.row("fp8").num_sequences >= 1
    (advice,) = plan.offload  # only bf16 lacks room
    assert advice.weight_format == "bf16" and advice.cpu_offload_gb is not None
    one_layer = advice.offloaded_bytes // advice.num_layers
    need = 4096 // 16 * plan.bytes_per_block["auto"]
    budget = plan.row("bf16").kv_budget_bytes
    assert budget + (advice.num_layers - 2) * one_layer >= need > budget + (advice.num_layers - 3) * one_layer
    assert advice.cpu_offload_gb * 2**30 >= advice.offloaded_bytes  # the engine then moves at least these layers
    assert any("--cpu-offload-gb" in note for note in plan.notes)
    measured = offload_rows(plan, config, 2, h2d_gbps=20.0)[0]
    assert measured.h2d_source == "given" and measured.ms_per_step > advice.ms_per_step


def test_a_model_that_fits_gets_no_advice(capsys):
    assert plan_memory(_config("llama-3.1-8b"), gpu_memory("H200"), ENGINE, seq_len=4096).offload == []
    main(["inspect", str(CONFIGS / "llama-3.1-70b"), "--gpu", "H200", "--max-model-len", "8192", "--json"])
    plan = json.loads(capsys.readouterr().out)["memory_plan"]
    assert [a["weight_format"] for a in plan["offload"]] == ["bf16"]
