"""Weight offload on a GPU with CUDA graphs on: greedy tokens identical with and without it, the copies
captured into the decode graphs (four offloaded layers share two slots, so a replay that did not copy
would read another layer's weights), the host buffers page-locked, and the KV cache given the room.

Run: `pytest -q tests/gpu/test_offload_gpu.py` (scripts/device/offload_h200.sh runs it with the benchmark).
"""

from __future__ import annotations

import gc
from pathlib import Path

import pytest
import torch

from model_optimizer import LLM, SamplingParams
from model_optimizer.runtime.runner.weight_offload import decoder_layers, layer_weights
from tests import tiny_checkpoints as tiny

CONFIGS = Path(__file__).resolve().parents[2] / "benchmarks" / "configs"
GREEDY = SamplingParams(temperature=0, max_tokens=24, ignore_eos=True)
PROMPTS = [[5, 17, 300, 41, 9, 77], [900, 3, 3, 250, 12, 64, 8, 199, 4, 31, 600], [42], list(range(3, 140))]


@pytest.fixture(scope="module")
def six_layers(tmp_path_factory):
    config = tiny.tiny_config("qwen3", num_hidden_layers=6, head_dim=32, hidden_size=128, intermediate_size=256)
    return tiny.build_checkpoint(tmp_path_factory.mktemp("offload_gpu") / "qwen3", config, seed=11)


def greedy(llm: LLM, prompts: list[list[int]] = PROMPTS) -> list[list[int]]:
    return [o.outputs[0].token_ids for o in llm.generate(prompts, GREEDY)]


def layer_gib(llm: LLM, index: int) -> float:
    layer = decoder_layers(llm.runner.model)[index]
    return sum(t.numel() * t.element_size() for _, _, t in layer_weights(layer)) / 2**30


@pytest.mark.parametrize("quantization", [None, "int8", "rtn-int4"])
def test_greedy_is_identical_with_graphs_on(six_layers, quantization):
    kwargs = dict(dtype="bfloat16", num_kv_blocks=256, max_num_seqs=8, quantization=quantization)
    plain = LLM(str(six_layers), **kwargs)
    expected, four_layers = greedy(plain), 3.5 * layer_gib(plain, 0)
    del plain
    gc.collect()
    llm = LLM(str(six_layers), cpu_offload_gb=four_layers, **kwargs)
    offload = llm.runner.model.weight_offload
    assert offload.layer_ids == [0, 2, 3, 5]  # (j + 1) * 6 // 4 - 1
    assert all(s.device.type == "cuda" for s in offload.slots) and all(h.device.type == "cpu" for h in offload.hosts)
    assert llm.runner.decode_runner is not None and llm.runner.decode_runner.graphs  # graphs kept
    assert greedy(llm) == expected
    assert greedy(llm, PROMPTS[:1] * 5) == [expected[0]] * 5  # a bigger decode bucket, replayed again


def test_qwen3_shaped_dummy_model_and_the_kv_room(tmp_path):
    """Qwen3-0.6B's config with dummy weights (drawn on the GPU whatever layer lives where): the same
    greedy tokens, and the offloaded bytes less the two slots come back as KV blocks."""
    kwargs = dict(load_format="dummy", dtype="bfloat16", max_model_len=1024, gpu_memory_utilization=0.3)
    plain = LLM(str(CONFIGS / "qwen3-0.6b"), **kwargs)
    expected, plain_blocks = greedy(plain), plain.runner.num_kv_blocks
    bytes_per_block = plain.runner.bytes_per_block()
    del plain
    gc.collect()
    torch.cuda.empty_cache()
    llm = LLM(str(CONFIGS / "qwen3-0.6b"), cpu_offload_gb=0.5, **kwargs)
    offload = llm.runner.model.weight_offload
    assert greedy(llm) == expected
    freed = offload.host_bytes - offload.device_bytes
    gained = llm.runner.num_kv_blocks - plain_blocks
    assert gained > 0 and abs(gained * bytes_per_block - freed) < 0.05 * freed + 64 * bytes_per_block


def test_host_kv_tier_loads_an_evicted_prefix_with_graphs_on(tiny_model):
    """A prefix evicted from a 16-block GPU pool comes back from host memory: same greedy tokens as
    recomputing it, and the hits are counted as host hits."""
    prefix = [(i * 37) % 900 + 5 for i in range(24)]
    prompts = (prefix + [1, 2, 3], [(i * 53) % 900 + 7 for i in range(40)], prefix + [9, 8, 7, 6])
    kwargs = dict(dtype="bfloat16", block_size=4, num_kv_blocks=16, max_model_len=64, max_num_seqs=1)
    runs = []
    for size in (0, 1e-3):
        llm = LLM(str(tiny_model("qwen3")), kv_offloading_size=size, **kwargs)
        runs.append([llm.generate([p], GREEDY)[0].outputs[0].token_ids for p in prompts])
    assert runs[0] == runs[1]
    assert llm.engine.stats().host_kv_hits > 0


def test_swap_preemption_keeps_greedy_tokens_with_graphs_on(tiny_model):
    """preemption_mode swap on a 16-block pool: six requests squeeze it, the preempted ones' blocks go to
    host memory and back (batched copies, CUDA graphs on), and the tokens are those of a roomy pool."""
    prompts = [[(i * 31 + j * 7) % 900 + 5 for j in range(14 + 5 * i)] for i in range(6)]
    kwargs = dict(dtype="bfloat16", block_size=4, max_model_len=64, max_num_seqs=6)
    expected = greedy(LLM(str(tiny_model("qwen3")), num_kv_blocks=256, **kwargs), prompts)
    llm = LLM(str(tiny_model("qwen3")), num_kv_blocks=16, preemption_mode="swap", kv_offloading_size=1e-3, **kwargs)
    assert llm.runner.host_kv.batched
    assert greedy(llm, prompts) == expected
    stats = llm.engine.stats()
    assert stats.num_preemptions > 0 and stats.num_swapped_in_blocks == stats.num_swapped_out_blocks > 0
