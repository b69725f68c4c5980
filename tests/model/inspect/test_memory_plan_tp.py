"""The memory plan under tensor parallelism: per-GPU figures by the engine's own sharding rules,
checked against sums done by hand, and the smallest tensor_parallel_size that fits a GPU."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from model_optimizer.cli.main import main
from model_optimizer.model.inspect.memory_plan import plan_memory
from model_optimizer.model.inspect.plan_gpu import gpu_memory
from model_optimizer.model.inspect.plan_shape import valid_tensor_parallel_sizes
from model_optimizer.runtime.config import EngineConfig

ROOT = Path(__file__).resolve().parents[3]
LLAMA_70B = json.loads((ROOT / "benchmarks" / "configs" / "llama-3.1-70b" / "config.json").read_text())
TINY_LLAMA = {
    "architectures": ["LlamaForCausalLM"],
    "model_type": "llama",
    "vocab_size": 1031,  # odd: padded to 1032 over 2 GPUs
    "hidden_size": 64,
    "intermediate_size": 128,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 1,  # fewer than 2 GPUs: replicated
    "head_dim": 16,
    "max_position_embeddings": 256,
    "rms_norm_eps": 1e-5,
    "tie_word_embeddings": False,
    "torch_dtype": "float32",
}


def test_tiny_llama_per_gpu_by_hand():
    one = plan_memory(TINY_LLAMA, engine=EngineConfig(dtype="float32"))
    two = plan_memory(TINY_LLAMA, engine=EngineConfig(dtype="float32", tensor_parallel_size=2))
    # tp=1: embed + lm_head 2*1031*64; per layer qkv (64+16+16)*64, o 64*64, gate_up 2*128*64, down 64*128, 2 norms
    assert one.num_params == 2 * 1031 * 64 + 2 * (96 * 64 + 64 * 64 + 2 * 128 * 64 + 64 * 128 + 128) + 64
    # tp=2: 516 vocabulary rows each; 2 query heads, the one KV head whole; half the MLP and o_proj inputs
    per_gpu = 2 * 516 * 64 + 2 * ((32 + 16 + 16) * 64 + 64 * 32 + 2 * 64 * 64 + 64 * 64 + 128) + 64
    assert two.num_params == per_gpu == 103232
    assert two.weight_bytes_by_format["fp32"] == 4 * per_gpu
    assert two.tensor_parallel_size == 2
    # the replicated KV head: every GPU stores all of it, as on one GPU
    assert two.kv_bytes_per_token["auto"] == one.kv_bytes_per_token["auto"] == 2 * 2 * 1 * 16 * 4
    assert any("replicated" in note and "1,032" in note for note in two.notes)


def test_llama_70b_on_h200_needs_two_gpus():
    h200 = gpu_memory("H200")
    one = plan_memory(LLAMA_70B, h200, EngineConfig(max_model_len=8192))
    two = plan_memory(LLAMA_70B, h200, EngineConfig(max_model_len=8192, tensor_parallel_size=2))
    # per GPU of 2: 64,128 vocabulary rows in embed and lm_head; per layer 32 q heads and 4 KV heads of 128,
    # o_proj 8192 x 4096, gate_up 2 x 14336 x 8192, down 8192 x 14336, two whole norms; one final norm
    layer = (32 + 4 + 4) * 128 * 8192 + 8192 * 4096 + 2 * 14336 * 8192 + 8192 * 14336 + 2 * 8192
    per_gpu = 2 * 64128 * 8192 + 80 * layer + 8192
    assert two.num_params == per_gpu == 35_277_512_704
    assert two.weight_bytes_by_format["bf16"] == 2 * per_gpu
    assert two.kv_bytes_per_token == {"auto": 2 * 80 * 4 * 128 * 2, "fp8": 2 * 80 * 4 * 128}
    assert one.kv_bytes_per_token["auto"] == 2 * two.kv_bytes_per_token["auto"]
    assert one.row("bf16").num_sequences == 0 and one.min_tensor_parallel_size == {"bf16": 2}
    assert any("--tensor-parallel-size 2" in note for note in one.notes)
    row = two.row("bf16")
    assert row.num_sequences >= 1 and two.min_tensor_parallel_size == {}
    budget = int(h200.total_bytes * 0.9) - two.weight_bytes_by_format["bf16"] - row.activation_bytes
    assert row.num_kv_blocks * 16 * 327680 // 2 <= budget  # whole blocks of 16 tokens inside the per-GPU budget


def test_kv_heads_split_then_replicated():
    sizes = {n: plan_memory(LLAMA_70B, engine=EngineConfig(tensor_parallel_size=n)) for n in (4, 8)}
    assert sizes[4].kv_bytes_per_token["auto"] == 2 * 80 * 2 * 128 * 2
    assert sizes[8].kv_bytes_per_token["auto"] == 2 * 80 * 1 * 128 * 2
    four_kv_heads = {**LLAMA_70B, "num_attention_heads": 64, "num_key_value_heads": 4}
    assert valid_tensor_parallel_sizes(four_kv_heads) == [1, 2, 4, 8]
    eight = plan_memory(four_kv_heads, engine=EngineConfig(tensor_parallel_size=8))
    assert eight.kv_bytes_per_token["auto"] == 2 * 80 * 1 * 128 * 2  # 4 heads over 8 GPUs: one each, shared


def test_invalid_size_is_a_clear_error(capsys):
    with pytest.raises(ValueError, match=r"num_attention_heads of 64 does not divide .*valid sizes: 1, 2, 4, 8"):
        plan_memory(LLAMA_70B, engine=EngineConfig(tensor_parallel_size=3))
    with pytest.raises(ValueError, match="tensor_parallel_size"):
        EngineConfig(tensor_parallel_size=0)
    folder = str(ROOT / "benchmarks" / "configs" / "llama-3.1-70b")
    assert main(["inspect", folder, "--tensor-parallel-size", "3"]) == 2
    assert "valid sizes: 1, 2, 4, 8" in capsys.readouterr().err


def test_cli_plan_per_gpu_in_json(capsys):
    folder = str(ROOT / "benchmarks" / "configs" / "llama-3.1-70b")
    main(["inspect", folder, "--gpu", "H200", "--max-model-len", "8192", "--tensor-parallel-size", "2", "--json"])
    plan = json.loads(capsys.readouterr().out)["memory_plan"]
    assert plan["tensor_parallel_size"] == 2 and plan["weight_bytes_by_format"]["bf16"] == 2 * 35_277_512_704
    assert plan["fits"][0]["num_sequences"] >= 1
    main(["inspect", folder, "--gpu", "H200", "--max-model-len", "8192"])
    assert "--tensor-parallel-size 2" in capsys.readouterr().out


def test_cli_token_counts_take_vllms_suffixes(capsys):
    """--max-model-len and --max-num-batched-tokens read 8K and 8k as generate and serve do (they were int)."""
    folder = str(ROOT / "benchmarks" / "configs" / "llama-3.1-70b")
    runs = []
    for length, batch in (("8K", "8k"), ("8192", "8000")):
        main(
            ["inspect", folder, "--gpu", "H200", "--max-model-len", length, "--max-num-batched-tokens", batch, "--json"]
        )
        runs.append(json.loads(capsys.readouterr().out)["memory_plan"])
    assert runs[0] == runs[1]


QWEN3_30B_A3B = json.loads((ROOT / "benchmarks" / "configs" / "qwen3-30b-a3b" / "config.json").read_text())


def test_valid_sizes_are_those_the_engine_builds_the_experts_at():
    """moe_intermediate_size 1004 splits 2 and 4 ways, not 8: the sizes listed were 1, 2, 4, 8 (heads and
    the dense width only), and the plan at 8 then failed in the engine's own split of the experts.
    With whole experts per GPU (expert parallel) the width is not split and 8 is fine."""
    odd = {**QWEN3_30B_A3B, "moe_intermediate_size": 1004}
    assert valid_tensor_parallel_sizes(odd) == [1, 2, 4]
    for n in (1, 2, 4):
        assert plan_memory(odd, engine=EngineConfig(max_model_len=4096, tensor_parallel_size=n)).num_params > 0
    with pytest.raises(ValueError, match=r"moe intermediate size of 1004 .*valid sizes: 1, 2, 4$"):
        plan_memory(odd, engine=EngineConfig(max_model_len=4096, tensor_parallel_size=8))
    assert valid_tensor_parallel_sizes(odd, expert_parallel=True) == [1, 2, 4, 8]


def test_the_search_for_more_gpus_never_ends_the_plan():
    """96 layers of Qwen3-30B-A3B with experts 1004 wide: on H100s 4 GPUs fit; on L4s no size does, and
    the search met the engine's ValueError at 8, which ended the whole plan, at tensor_parallel_size 1."""
    deep = {**QWEN3_30B_A3B, "moe_intermediate_size": 1004, "num_hidden_layers": 96}
    engine = EngineConfig(max_model_len=4096)
    assert plan_memory(deep, gpu_memory("H100"), engine).min_tensor_parallel_size == dict.fromkeys(
        ["bf16", "fp8", "int8", "int4"], 4
    )
    plan = plan_memory(deep, gpu_memory("L4"), engine)
    assert plan.min_tensor_parallel_size == dict.fromkeys(["bf16", "fp8", "int8", "int4"], None)
    assert any("none up to 8 GPUs does" in note for note in plan.notes)
