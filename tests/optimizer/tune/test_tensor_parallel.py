"""tensor_parallel_size in the tuner: fixed or searched, costed per GPU plus its all-reduces, and skipped
with the reason when it needs more GPUs than are visible or the model cannot be split so."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from model_optimizer.optimizer.tune.collectives import NCCL_US, ONE_SHOT_US, collectives_per_step, visible_gpu_count
from model_optimizer.optimizer.tune.hardware import hardware_from_datasheet
from model_optimizer.optimizer.tune.model_cost import model_cost
from model_optimizer.optimizer.tune.predictor import Predictor, Workload
from model_optimizer.optimizer.tune.space import build_space, read_space_file

CONFIGS = Path(__file__).resolve().parents[3] / "benchmarks" / "configs"
LLAMA_8B = json.loads((CONFIGS / "llama-3.1-8b" / "config.json").read_text())
LLAMA_70B = json.loads((CONFIGS / "llama-3.1-70b" / "config.json").read_text())
H200 = hardware_from_datasheet("H200")
DECODE_1 = Workload(prompt_len=128, output_len=256, concurrency=1)


def test_fixed_at_one_by_default_and_fixable_or_searchable(tmp_path):
    default = build_space()
    assert "tensor_parallel_size" not in {k.name for k in default.knobs} | set(default.fixed)
    fixed = build_space(fixes=["tensor_parallel_size=2"])
    assert fixed.fixed["tensor_parallel_size"] == 2
    assert fixed.settings({})["tensor_parallel_size"] == 2
    space_file = tmp_path / "space.yaml"
    space_file.write_text("tensor_parallel_size: [1, 2]\nmax_num_seqs: [8]\n")
    knob = next(k for k in build_space(str(space_file)).knobs if k.name == "tensor_parallel_size")
    assert knob.choices == [1, 2]
    space_file.write_text("tensor_parallel_size: [0, 2]\n")
    with pytest.raises(ValueError, match="tensor_parallel_size: value 0 is impossible"):
        build_space(str(space_file))
    with pytest.raises(ValueError, match="tensor_parallel_size must be a int"):
        build_space(fixes=["tensor_parallel_size=two"])
    assert read_space_file(tmp_path / "space.yaml")[0].name == "tensor_parallel_size"


def test_roofline_per_gpu_and_all_reduces_by_hand():
    predictor = Predictor(model_cost(LLAMA_8B), H200, num_gpus=2)
    settings = {"max_num_seqs": 64, "gpu_memory_utilization": 0.9}
    one = predictor.ideal(settings, DECODE_1)
    two = predictor.ideal(settings | {"tensor_parallel_size": 2, "one_shot_all_reduce": True}, DECODE_1)
    # each GPU reads half the weights, half the KV heads (8 over 2) and does half the FLOPs
    assert two.features["roof_ms"] == pytest.approx(one.features["roof_ms"] / 2, rel=1e-9)
    assert "allreduce_ms" not in one.features
    # batch 1: 66 collectives of 4096 bf16 values (8 KB) by the one-shot kernel (the few steps that carry
    # the 128-token prompt send larger messages through NCCL: a little more on average)
    per = ONE_SHOT_US[0] + 8192 / ONE_SHOT_US[1]
    assert collectives_per_step(32) == 66
    assert 66 * per / 1e3 < two.features["allreduce_ms"] < 1.03 * 66 * per / 1e3
    nccl = predictor.ideal(settings | {"tensor_parallel_size": 2}, DECODE_1)  # the engine's default
    assert 0.8 < nccl.features["allreduce_ms"] < 1.0
    nccl_per = NCCL_US[0] + 8192 / NCCL_US[1]
    assert 66 * nccl_per / 1e3 < nccl.features["allreduce_ms"] < 1.03 * 66 * nccl_per / 1e3
    assert two.tpot_ms < one.tpot_ms < 2 * two.tpot_ms
    assert two.memory_gib == pytest.approx(one.memory_gib)  # figures are per GPU: each takes its share


def test_replicated_kv_heads_keep_their_bytes_per_gpu():
    cost = model_cost(LLAMA_70B)
    assert cost.kv_bytes_per_gpu("auto", 2) == cost.kv_bytes_per_token["auto"] // 2
    assert cost.kv_bytes_per_gpu("auto", 8) == cost.kv_bytes_per_token["auto"] // 8
    one_head = model_cost({**LLAMA_8B, "num_key_value_heads": 1})
    assert one_head.kv_bytes_per_gpu("fp8", 4) == one_head.kv_bytes_per_token["fp8"]


def test_70b_needs_two_h200s_and_more_than_visible_is_skipped():
    predictor = Predictor(model_cost(LLAMA_70B), H200, config=LLAMA_70B, num_gpus=2)
    settings = {"max_model_len": 8192, "max_num_seqs": 64}
    one = predictor.ideal(settings, DECODE_1)
    assert not one.fits and predictor.skip_reason(one, {})
    two = predictor.ideal(settings | {"tensor_parallel_size": 2, "one_shot_all_reduce": True}, DECODE_1)
    assert two.fits and predictor.skip_reason(two, {}) is None
    assert two.kv_capacity_tokens > 300_000  # the memory plan's per-GPU blocks (24,545 x 16 at 0.9)
    four = predictor.ideal(settings | {"tensor_parallel_size": 4}, DECODE_1)
    assert not four.fits
    assert predictor.skip_reason(four, {}) == "tensor_parallel_size 4 needs 4 GPUs; 2 visible"


def test_a_size_the_model_cannot_split_is_skipped_with_the_engines_words():
    predictor = Predictor(model_cost(LLAMA_70B), H200, num_gpus=8)
    pred = predictor.ideal({"tensor_parallel_size": 3}, DECODE_1)
    assert not pred.fits
    assert pred.reason == "num_attention_heads of 64 does not divide by tensor_parallel_size 3"


def test_refit_learns_the_all_reduce_scale():
    predictor = Predictor(model_cost(LLAMA_8B), H200, num_gpus=2)
    truth = {"o_step": 0.5, "o_eager": 4.0, "e": 1.4, "ar": 1.3}
    cases = [
        ({"tensor_parallel_size": tp, "max_num_seqs": 64}, Workload(128, 256, concurrency=c))
        for tp in (1, 2)
        for c in (1, 8, 32)
    ]
    ideals = [predictor.ideal(s, w) for s, w in cases]
    from model_optimizer.optimizer.tune.step_fit import step_ms

    measured = [
        {"tpot_p99_ms": step_ms(truth, p.features), "output_throughput": 1e3 * p.running / step_ms(truth, p.features)}
        for p in ideals
    ]
    predictor.refit(list(zip(ideals, measured)))
    assert predictor.fit["tpot"]["ar"] == pytest.approx(1.3, rel=2e-2)


def test_visible_gpus_follow_cuda_visible_devices(monkeypatch):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0,3")
    assert visible_gpu_count() == 2
    assert Predictor(model_cost(LLAMA_8B), H200).num_gpus == 2
