"""Offload advice in the memory plan: the fewest layers whose offload lets one sequence fit, by the
engine's rules (two layer slots stay on the GPU), and the copy time each step then pays."""

from __future__ import annotations

import json
from pathlib import Path

import torch

from model_optimizer.cli.main import main
from model_optimizer.model.inspect.memory_plan import plan_memory
from model_optimizer.model.inspect.offload_plan import (
    DEFAULT_H2D_GBPS,
    host_to_device_gbps,
    offload_advice,
    offload_rows,
)
from model_optimizer.model.inspect.plan_gpu import gpu_memory
from model_optimizer.runtime.config import EngineConfig
from model_optimizer.runtime.layers.quantization.spec import QuantSpec, resolve_spec
from model_optimizer.runtime.models.loader import plan_offload
from model_optimizer.runtime.models.model_config import DecoderArgs
from model_optimizer.runtime.models.registry import resolve_model_class
from model_optimizer.runtime.runner.offload_rule import LayerSize
from model_optimizer.runtime.runner.weight_offload import choose_offloaded_layers

CONFIGS = Path(__file__).resolve().parents[3] / "benchmarks" / "configs"
ENGINE = EngineConfig(max_model_len=8192)
AWQ_64 = {"quant_method": "awq", "bits": 4, "group_size": 64, "zero_point": True, "version": "gemm"}


def _config(name: str) -> dict:
    return json.loads((CONFIGS / name / "config.json").read_text())


def test_link_bandwidth_from_the_datasheet_or_a_conservative_default():
    gbps, source = host_to_device_gbps("NVIDIA H200")
    assert 45 < gbps < 55 and "PCIe gen5 x16" in source  # 80% of 63 GB/s
    assert host_to_device_gbps("Some Unknown GPU") == (DEFAULT_H2D_GBPS, "default (no PCIe link in the datasheet)")


def test_fewest_layers_that_free_the_missing_bytes_beyond_two_slots():
    advice = offload_advice("bf16", missing_bytes=25, sizes=[LayerSize(10, 10)] * 8, h2d=(20.0, "given"))
    assert advice.num_layers == 5  # 5 layers leave, 2 slots come: 30 >= 25 bytes freed; 4 free only 20
    assert advice.offloaded_bytes == 50 and advice.ms_per_step == 50 / 20e9 * 1e3
    assert len(choose_offloaded_layers([10] * 8, int(advice.cpu_offload_gb * 2**30))) == 5
    never = offload_advice("bf16", 1000, [LayerSize(10, 10)] * 8, (20.0, "given"))
    assert never.cpu_offload_gb is None  # not even all layers


def test_uneven_layers_count_the_slots_as_large_as_the_largest_layer_moved():
    """A dense first layer four times the others (a mixture of experts' first_k_dense_replace): once it is
    among the layers moved, both slots are its size, and only every layer frees 25 bytes."""
    sizes = [40] + [10] * 7
    advice = offload_advice("bf16", missing_bytes=25, sizes=[LayerSize(b, b) for b in sizes], h2d=(20.0, "given"))
    assert advice.num_layers == 8 and advice.offloaded_bytes == 110
    budget = int(advice.cpu_offload_gb * 2**30)
    assert budget <= sum(sizes) and len(choose_offloaded_layers(sizes, budget)) == 8  # the engine accepts it


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
    assert engine_offloads(config, None, advice.cpu_offload_gb) == advice.num_layers
    assert any(f"--cpu-offload-gb {advice.cpu_offload_gb} " in note for note in plan.notes)
    measured = offload_rows(plan, config, h2d_gbps=20.0)[0]
    assert measured.h2d_source == "given" and measured.ms_per_step > advice.ms_per_step


def test_the_engine_offloads_exactly_the_advised_layers():
    """Llama-3.1-70B at 8,192 tokens on one H200: --cpu-offload-gb 12.8 (8 layers' 12.75 GiB rounded up)
    made the engine take 9 layers (306 ms a step, not the 272 ms said). Now the value printed is one at
    which the engine's own choice (loader.plan_offload, as `--cpu-offload-gb` runs it) is the layers
    advised, in every format, a pre-quantized checkpoint's included, and never more than they hold."""
    config = _config("llama-3.1-70b")
    h200 = plan_memory(config, gpu_memory("H200"), ENGINE)
    (advice,) = h200.offload
    assert advice.num_layers == 8 and advice.cpu_offload_gb * 2**30 <= advice.offloaded_bytes
    assert engine_offloads(config, None, advice.cpu_offload_gb) == 8
    small = plan_memory(config, gpu_memory("L4"), ENGINE)  # no format fits: advice for each
    assert [a.weight_format for a in small.offload] == ["bf16", "fp8", "int8", "int4"]
    methods = {"bf16": None, "fp8": "fp8", "int8": "int8", "int4": "rtn-int4"}
    for advice in small.offload:
        spec = QuantSpec(methods[advice.weight_format]) if methods[advice.weight_format] else None
        assert engine_offloads(config, spec, advice.cpu_offload_gb) == advice.num_layers, advice
    awq = {**config, "quantization_config": AWQ_64}
    (advice,) = plan_memory(awq, gpu_memory("L4"), ENGINE).offload
    assert engine_offloads(awq, resolve_spec(awq, None), advice.cpu_offload_gb) == advice.num_layers


def engine_offloads(config: dict, spec: QuantSpec | None, cpu_offload_gb: float) -> int:
    """How many decoder layers the engine's loader offloads for `cpu_offload_gb` (bf16 weights)."""
    args = DecoderArgs.from_dict(config)
    model_cls = resolve_model_class(args.architecture)
    return len(plan_offload(lambda: model_cls(args), spec, torch.bfloat16, cpu_offload_gb, "auto"))


def test_a_model_that_fits_gets_no_advice(capsys):
    assert plan_memory(_config("llama-3.1-8b"), gpu_memory("H200"), ENGINE, seq_len=4096).offload == []
    main(["inspect", str(CONFIGS / "llama-3.1-70b"), "--gpu", "H200", "--max-model-len", "8192", "--json"])
    plan = json.loads(capsys.readouterr().out)["memory_plan"]
    assert [a["weight_format"] for a in plan["offload"]] == ["bf16"]
