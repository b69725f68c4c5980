"""The memory plan uses the engine's own numbers: block size in bytes and weight bytes as the
runner allocates them, and it reproduces the KV blocks the engine allocated in a recorded H200 run."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from model_optimizer import LLM
from model_optimizer.cli.main import main
from model_optimizer.model.inspect.memory_plan import plan_memory
from model_optimizer.model.inspect.plan_gpu import GpuMemory, gpu_memory
from model_optimizer.model.inspect.plan_shape import model_shape
from model_optimizer.runtime.config import EngineConfig

ROOT = Path(__file__).resolve().parents[3]
CONFIGS = ROOT / "benchmarks" / "configs"
GIB = 1 << 30


def _config(folder) -> dict:
    return json.loads((Path(folder) / "config.json").read_text())


@pytest.mark.parametrize("name", ["qwen3", "llama3"])
def test_block_and_weight_bytes_are_the_engines(tiny_model, name):
    folder = tiny_model(name)
    llm = LLM(str(folder), dtype="float32", kv_cache_memory=1 << 22)
    plan = plan_memory(_config(folder), engine=EngineConfig(dtype="float32", block_size=llm.runner.config.block_size))
    model = llm.runner.model
    assert plan.bytes_per_block["auto"] == llm.runner.bytes_per_block()
    assert plan.weight_bytes_by_format["fp32"] == sum(p.numel() * p.element_size() for p in model.parameters())
    assert model_shape(_config(folder), "float32").buffer_bytes == sum(
        b.numel() * b.element_size() for b in model.buffers()
    )


def test_reproduces_the_recorded_h200_allocation():
    """benchmarks/results/throughput_h200.json: Qwen3-0.6B config, dummy bf16 weights, default utilization."""
    run = json.loads((ROOT / "benchmarks" / "results" / "throughput_h200.json").read_text())
    doctor = json.loads((ROOT / "benchmarks" / "results" / "doctor_h200.json").read_text())
    total = doctor["bench"]["device"]["total_memory"]
    engine = EngineConfig(
        dtype="bfloat16",
        max_model_len=run["workload"]["max_model_len"],
        max_num_batched_tokens=run["config"]["max_num_batched_tokens"],
        max_num_seqs=run["config"]["max_num_seqs"],
    )
    plan = plan_memory(_config(CONFIGS / "qwen3-0.6b"), GpuMemory("H200", total, None, "measured"), engine)
    assert abs(plan.row("bf16", "auto").num_kv_blocks - run["ours"]["num_kv_blocks"]) <= 1


def test_formats_kv_dtypes_and_utilization_move_the_plan_the_right_way():
    config = _config(CONFIGS / "llama-3.1-8b")
    low, high = (
        plan_memory(
            config, gpu_memory("H200"), EngineConfig(gpu_memory_utilization=u, max_model_len=8192), seq_len=4096
        )
        for u in (0.5, 0.9)
    )
    weights = high.weight_bytes_by_format
    assert weights["int4"] < weights["int8"] == weights["fp8"] < weights["bf16"]
    assert 15.9e9 < weights["bf16"] < 16.2e9  # 8.03 B parameters in bf16
    assert high.kv_bytes_per_token == {"auto": 32 * 2 * 8 * 128 * 2, "fp8": 32 * 2 * 8 * 128}
    assert high.row("bf16", "auto").num_kv_blocks > low.row("bf16", "auto").num_kv_blocks > 0
    assert high.row("bf16", "fp8").num_kv_blocks >= 2 * high.row("bf16", "auto").num_kv_blocks
    assert high.row("int4", "auto").num_kv_blocks > high.row("bf16", "auto").num_kv_blocks
    row = high.row("bf16", "auto")
    assert row.num_sequences == row.num_kv_blocks // (4096 // 16) and row.num_tokens == 16 * row.num_kv_blocks


def test_a_model_that_does_not_fit_plans_zero_blocks():
    plan = plan_memory(
        _config(CONFIGS / "llama-3.1-8b"),
        gpu_memory("L4"),
        EngineConfig(gpu_memory_utilization=0.5, max_model_len=8192),
    )
    assert plan.row().num_kv_blocks == 0 and plan.row().kv_budget_bytes < 0
    assert plan.row("int4", "fp8").num_kv_blocks > 0


def test_bad_settings_are_errors():
    config = _config(CONFIGS / "qwen3-0.6b")
    with pytest.raises(ValueError, match="seq_len"):
        plan_memory(config, None, EngineConfig(max_model_len=1024), seq_len=2048)
    with pytest.raises(ValueError, match="max_position_embeddings"):
        plan_memory(config, None, EngineConfig(max_model_len=10**6))
    with pytest.raises(ValueError, match="matches no datasheet"):
        gpu_memory("Voodoo 2")


def test_cli_prints_the_plan_in_json(capsys):
    code = main(["inspect", str(CONFIGS / "qwen3-0.6b"), "--gpu", "H200", "--max-model-len", "4096", "--json"])
    doc = json.loads(capsys.readouterr().out)
    assert code == 1  # a config-only folder has no weights: an error finding, and still a plan
    plan = doc["memory_plan"]
    assert plan["gpu"]["name"] == "H200 SXM" and len(plan["fits"]) == 8
    assert plan["profile_tokens"] == 4096


def _engine_weight_bytes(model) -> int:
    """What a loaded model holds as weights: its parameters, and its quantized linears' codes, scales and
    zero points (buffers once loaded)."""
    from model_optimizer.runtime.layers.linear import Linear

    tensors = {id(t): t for t in model.parameters()}
    tensors.update({id(b): b for m in model.modules() if isinstance(m, Linear) for b in m.buffers(recurse=False)})
    return sum(t.numel() * t.element_size() for t in tensors.values())


def _quantized_folder(src: Path, out: Path, method: str, group_size: int) -> Path:
    """What `mopt quantize` writes for `src` (its rounding and writer, without the accuracy gate)."""
    import torch

    from model_optimizer.model.quantize.job import Progress, QuantizeOptions, round_in_place
    from model_optimizer.model.quantize.writer import save_compressed_tensors
    from model_optimizer.runtime.models.loader import load_model

    model = load_model(src, "float32", torch.device("cpu"))
    round_in_place(model, QuantizeOptions(src, method, out, group_size=group_size), torch.float32, Progress())
    save_compressed_tensors(model, method, group_size, src, out)
    return out


@pytest.mark.parametrize("method,fmt", [("fp8", "fp8"), ("int8", "int8"), ("rtn-int4", "int4")])
def test_quantized_weight_bytes_are_the_engines(quant_model, method, fmt):
    """int4 keeps a uint8 zero point beside each group's scale: the plan left the zero points out."""
    import torch

    from model_optimizer.runtime.models.loader import load_model

    folder = quant_model("qwen3")
    model = load_model(folder, "float32", torch.device("cpu"), quantization=method)
    plan = plan_memory(_config(folder), engine=EngineConfig(dtype="float32"))
    assert plan.weight_bytes_by_format[fmt] == _engine_weight_bytes(model)


@pytest.mark.parametrize("name,method,group_size", [("qwen3", "rtn-int4", 64), ("moe", "int8", 128)])
def test_a_quantized_checkpoint_is_planned_only_as_the_engine_loads_it(
    quant_model, tiny_model, tmp_path, capsys, name, method, group_size
):
    """An int4 folder in groups of 64 and a mixture of experts' int8 one (experts and routers left in
    float by its `ignore`) were planned as float models, in bf16/fp8/int8/int4 with groups of 128,
    advising formats and GPU counts the engine cannot run them in. Now one row: the format the engine
    loads, with the folder's own groups and `ignore`, byte for byte what the engine then holds."""
    import torch

    from model_optimizer.runtime.models.loader import load_model

    src = quant_model("qwen3") if name == "qwen3" else tiny_model("qwen3_moe")
    folder = _quantized_folder(src, tmp_path / "q", method, group_size)
    fmt = {"rtn-int4": "int4", "int8": "int8"}[method]
    plan = plan_memory(_config(folder), gpu_memory("H200"), EngineConfig(dtype="float32"))
    assert list(plan.weight_bytes_by_format) == [fmt] and {row.weight_format for row in plan.fits} == {fmt}
    engine = load_model(folder, "float32", torch.device("cpu"))
    assert plan.weight_bytes_by_format[fmt] == _engine_weight_bytes(engine)
    groups = f" in groups of {group_size}" if fmt == "int4" else ""
    assert any(
        f"already quantized ({method}, compressed-tensors layout)" in n and f"as {fmt}{groups} " in n
        for n in plan.notes
    )
    assert not any("fp8/int8/int4" in note for note in plan.notes)
    with pytest.raises(ValueError, match="does not support pre-quantized checkpoints"):
        plan_memory(_config(folder), engine=EngineConfig(dtype="float32", tensor_parallel_size=2))
    main(["inspect", str(folder), "--gpu", "H200", "--json"])  # the command plans the same
    assert list(json.loads(capsys.readouterr().out)["memory_plan"]["weight_bytes_by_format"]) == [fmt]
    assert main(["inspect", str(folder), "--gpu", "H200", "--tensor-parallel-size", "2"]) == 2
    assert "does not support pre-quantized checkpoints" in capsys.readouterr().err


def test_a_prequantized_model_too_large_for_one_gpu_gets_offload_not_more_gpus(capsys):
    """AWQ Llama-3.1-70B on an L4: int4 alone, in its own groups of 64 (more scales than 128's), no
    --tensor-parallel-size (the engine refuses a pre-quantized checkpoint over several GPUs), offload."""
    awq = {"quant_method": "awq", "bits": 4, "group_size": 64, "zero_point": True, "version": "gemm"}
    config = {**_config(CONFIGS / "llama-3.1-70b"), "quantization_config": awq}
    plan = plan_memory(config, gpu_memory("L4"), EngineConfig(max_model_len=8192))
    groups_of_128 = plan_memory({**config, "quantization_config": {**awq, "group_size": 128}})
    assert list(plan.weight_bytes_by_format) == ["int4"]
    assert plan.weight_bytes_by_format["int4"] > groups_of_128.weight_bytes_by_format["int4"]
    assert plan.min_tensor_parallel_size == {} and not any("--tensor-parallel-size" in n for n in plan.notes)
    assert [a.weight_format for a in plan.offload] == ["int4"] and plan.offload[0].cpu_offload_gb
    assert any("the only size the engine runs a pre-quantized checkpoint at" in n for n in plan.notes)


def test_a_format_the_engine_refuses_is_left_out_with_its_reason(capsys):
    """DeepSeek-V2-Lite's dense MLP takes 10,944 inputs, which int4 groups of 128 do not tile: the engine
    refuses rtn-int4 for it, so the plan offers no int4 row (it raised building that row's offload advice)."""
    config = _config(CONFIGS / "deepseek-v2-lite")
    plan = plan_memory(config, gpu_memory("L4"), EngineConfig(max_model_len=32768, gpu_memory_utilization=0.95))
    assert list(plan.weight_bytes_by_format) == ["bf16", "fp8", "int8"]
    assert {row.weight_format for row in plan.fits} == {"bf16", "fp8", "int8"}
    assert any("int4 weights: left out" in note and "10944" in note for note in plan.notes)
    assert "int4" not in plan.min_tensor_parallel_size
    code = main(["inspect", str(CONFIGS / "deepseek-v2-lite"), "--gpu", "L4", "--max-model-len", "32768", "--json"])
    assert code in (0, 1) and "int4 weights: left out" in capsys.readouterr().out
