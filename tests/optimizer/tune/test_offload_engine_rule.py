"""The tuner's estimate of `cpu_offload_gb` is the engine's own: the layers it offloads, the bytes each step
copies and the device slots, compared with what the engine does on a tiny checkpoint on the CPU; a value
above what the decoder layers hold is pruned with the engine's own message. (It was min(G, weights / tp),
which took values the engine refuses as workable and freed G less two layers on the GPU.)"""

from __future__ import annotations

import json

import pytest

from model_optimizer import LLM
from model_optimizer.optimizer.tune.hardware import Hardware
from model_optimizer.optimizer.tune.model_cost import model_cost
from model_optimizer.optimizer.tune.predictor import Predictor, Workload
from model_optimizer.optimizer.tune.server_memory import ServerMemory
from model_optimizer.runtime.runner.weight_offload import decoder_layers, layer_weights
from tests import tiny_checkpoints as tiny

SMALL = dict(dtype="float32", kv_cache_memory=1 << 22)
CPU = Hardware("cpu", bandwidth_gbps=20.0, tflops=0.2, memory_gib=16.0, is_gpu=False, source="test")
GPU = Hardware("test", bandwidth_gbps=100.0, tflops=10.0, memory_gib=1.0, is_gpu=True, source="test", h2d_gbps=2.0)
LOAD = Workload(prompt_len=16, output_len=8, concurrency=1)


@pytest.fixture(scope="module")
def five_layers(tmp_path_factory):
    """A tiny Qwen3 with five layers (layer 0 like the others: every layer the same size)."""
    config = tiny.tiny_config("qwen3", num_hidden_layers=5, head_dim=16, tie_word_embeddings=True)
    return tiny.build_checkpoint(tmp_path_factory.mktemp("offload_rule") / "qwen3", config, seed=3)


def memory_of(model_dir, hardware: Hardware) -> ServerMemory:
    config = json.loads((model_dir / "config.json").read_text())
    return ServerMemory(model_cost(config, "float32"), hardware, config)


def weight_bytes(llm: LLM, layer_ids: list[int]) -> int:
    layers = decoder_layers(llm.runner.model)
    return sum(t.numel() * t.element_size() for i in layer_ids for _, _, t in layer_weights(layers[i]))


@pytest.mark.parametrize(("num_layers", "quantization"), [(1, None), (3, None), (3, "int8")])
def test_the_estimate_is_what_the_engine_offloads(five_layers, num_layers, quantization):
    """One layer (one slot) and three (two slots taking turns), float or int8 weights: the same layers,
    copy and slot bytes."""
    memory = memory_of(five_layers, CPU)
    run = {"dtype": "float32", "quantization": quantization}
    sizes = memory.layer_sizes(run)
    gib = (sum(s.weight_bytes for s in sizes[: num_layers - 1]) + 1) / 2**30  # just past num_layers - 1 of them
    settings = run | {"cpu_offload_gb": gib}
    estimate = memory.offload(settings)
    offloaded = LLM(str(five_layers), cpu_offload_gb=gib, quantization=quantization, **SMALL)
    engine = offloaded.runner.model.weight_offload
    assert estimate.layer_ids == engine.layer_ids and len(engine.layer_ids) == num_layers
    assert (estimate.host_bytes, estimate.device_bytes) == (engine.host_bytes, engine.device_bytes)
    assert estimate.num_slots == len(engine.slots) == min(num_layers, 2)
    plain = LLM(str(five_layers), quantization=quantization, **SMALL)
    assert estimate.offloaded_bytes == weight_bytes(plain, engine.layer_ids)
    assert memory.offload_bytes(settings) == engine.host_bytes  # what every step copies
    gpu = memory_of(five_layers, GPU)  # on a GPU the KV cache gains the layers less the slots
    assert gpu.offload_freed(settings) == estimate.offloaded_bytes - engine.device_bytes


def test_more_than_the_layers_hold_is_pruned_with_the_engines_reason(five_layers):
    with pytest.raises(ValueError, match="cpu_offload_gb asks for") as refused:
        LLM(str(five_layers), cpu_offload_gb=1.0, **SMALL)
    config = json.loads((five_layers / "config.json").read_text())
    for hardware in (CPU, GPU):
        predictor = Predictor(model_cost(config, "float32"), hardware, config=config, num_gpus=1)
        pred = predictor.ideal({"dtype": "float32", "cpu_offload_gb": 1.0, "num_kv_blocks": 64}, LOAD)
        assert not pred.fits and pred.reason == str(refused.value)
        assert predictor.skip_reason(pred, {}) == str(refused.value)
        assert predictor.ideal({"dtype": "float32", "cpu_offload_gb": 1e-9, "num_kv_blocks": 64}, LOAD).fits
