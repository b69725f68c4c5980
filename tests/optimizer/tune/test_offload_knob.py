"""cpu_offload_gb as a tuning knob: the space file accepts it, and the predictor charges every step the copy
of the offloaded bytes and gives the KV cache what they free beyond the two layer slots."""

from __future__ import annotations

import json

import pytest

from model_optimizer.optimizer.tune.hardware import Hardware, hardware_from_doctor
from model_optimizer.optimizer.tune.model_cost import model_cost
from model_optimizer.optimizer.tune.predictor import Predictor, Workload
from model_optimizer.optimizer.tune.space import build_space

CONFIG = dict(
    num_hidden_layers=8,
    hidden_size=1024,
    num_attention_heads=8,
    num_key_value_heads=2,
    head_dim=128,
    intermediate_size=4096,
    vocab_size=1000,
    tie_word_embeddings=True,
    torch_dtype="bfloat16",
    max_position_embeddings=4096,
)
# a GPU of 0.25 GiB with 2 GB/s from the host: every offloaded GiB costs ~0.54 s a step
GPU = Hardware("test", bandwidth_gbps=100.0, tflops=10.0, memory_gib=0.25, is_gpu=True, source="test", h2d_gbps=2.0)
SETTINGS = dict(max_num_seqs=4, max_num_batched_tokens=256, block_size=16, gpu_memory_utilization=0.9)
LOAD = Workload(prompt_len=64, output_len=16, concurrency=2)


def test_space_file_knob(tmp_path):
    path = tmp_path / "space.yaml"
    path.write_text("cpu_offload_gb: [0, 0.5, 1.5]\nmax_num_seqs: [8, 16]\n")
    space = build_space(str(path))
    assert [k.name for k in space.knobs] == ["cpu_offload_gb", "max_num_seqs"]
    assert space.settings({"cpu_offload_gb": 1.5, "max_num_seqs": 8})["cpu_offload_gb"] == 1.5
    with pytest.raises(ValueError, match="cpu_offload_gb must be a number of GiB >= 0"):
        build_space(None, ["cpu_offload_gb=-2"])


def test_offload_buys_kv_room_and_costs_each_step_its_copy():
    predictor = Predictor(model_cost(CONFIG), GPU)
    weights = predictor.cost.weight_bytes  # ~0.26 GB of bf16: more than 0.9 x 0.25 GiB
    plain = predictor.ideal(SETTINGS, LOAD)
    assert not plain.fits
    offloaded = predictor.ideal(SETTINGS | {"cpu_offload_gb": 0.15}, LOAD)
    assert offloaded.fits and offloaded.kv_capacity_tokens > plain.kv_capacity_tokens
    same_kv = SETTINGS | {"num_kv_blocks": 64}  # the same batch either way: only the copy differs
    before, after = predictor.ideal(same_kv, LOAD), predictor.ideal(same_kv | {"cpu_offload_gb": 0.15}, LOAD)
    one_layer = weights * predictor.cost.layer_params // predictor.cost.num_params // 8  # ~0.028 GiB
    copy_ms = 1e3 * 6 * one_layer / 2e9  # whole layers until 0.15 GiB is reached: 6 of the 8
    assert after.features["roof_ms"] - before.features["roof_ms"] == pytest.approx(copy_ms)
    assert after.tpot_ms > before.tpot_ms + copy_ms * 0.9  # every step pays it (e = 1 by the prior)


def test_doctor_file_gives_the_measured_host_link(tmp_path):
    results = [
        {"name": "d2d_copy", "value": 4000.0},
        {"name": "matmul_bf16", "value": 700.0},
        {"name": "h2d_pinned", "value": 54.8},
    ]
    path = tmp_path / "doctor.json"
    path.write_text(json.dumps({"bench": {"device": {"name": "NVIDIA H200"}, "results": results}}))
    assert hardware_from_doctor(path).h2d_gbps == 54.8
