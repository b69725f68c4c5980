"""The analytic predictor against figures computed by hand, its refit, and the candidates it skips."""

from __future__ import annotations

import pytest

from model_optimizer.tune.hardware import Hardware, hardware_from_datasheet, hardware_from_doctor
from model_optimizer.tune.predictor import Predictor, Workload, line_fit, mape, model_cost

CONFIG = dict(
    num_hidden_layers=2,
    hidden_size=64,
    num_attention_heads=4,
    num_key_value_heads=2,
    head_dim=16,
    intermediate_size=128,
    vocab_size=100,
    tie_word_embeddings=False,
    torch_dtype="bfloat16",
    max_position_embeddings=512,
)
# 1 GB/s and 1 GFLOP/s: every second below is bytes / 1e9 or FLOPs / 1e9
SLOW = Hardware("test", bandwidth_gbps=1.0, tflops=1e-3, memory_gib=16.0, is_gpu=False, source="test")
SETTINGS = dict(max_num_seqs=4, max_num_batched_tokens=8, num_kv_blocks=10, block_size=16)
LOAD = Workload(prompt_len=16, output_len=8, concurrency=2)


def test_model_cost_by_hand():
    cost = model_cost(CONFIG)
    # per layer: q 64x64 + k,v 2 x 64x32 + o 64x64 + gate/up/down 3 x 64x128 = 36,864
    assert cost.linear_params == 2 * 36864 + 100 * 64  # layers + lm_head
    assert cost.num_params == 2 * 36864 + 2 * 100 * 64  # untied: embedding and lm_head
    assert cost.weight_bytes == 2 * 86528
    assert cost.kv_bytes_per_token == {"auto": 2 * 2 * 32 * 2, "fp8": 2 * 2 * 32}
    assert cost.attn_flops_per_ctx_token == 4 * 2 * 64
    assert model_cost(CONFIG | {"tie_word_embeddings": True}).num_params == 2 * 36864 + 100 * 64


def test_ideal_figures_by_hand():
    pred = Predictor(model_cost(CONFIG), SLOW).ideal(SETTINGS, LOAD)
    # KV cache: 10 blocks x 16 tokens; running: the closed loop's 2 (under max_num_seqs 4)
    assert pred.kv_capacity_tokens == 160 and pred.running == 2
    # prefill: 2 chunks of 8 read the weights twice (2 x 173,056 B) + 16 tokens x (2 x 80,128 + 512 x 8) FLOPs
    t_prefill = (2 * 173056 + 16 * (160256 + 512 * 8)) / 1e9
    # decode of 2 at context 20: weights + 2 x 20 x 256 B of KV; 2 x (160,256 + 512 x 20) FLOPs
    t_decode = (173056 + 2 * 20 * 256 + 2 * (160256 + 512 * 20)) / 1e9
    tpot = t_decode + (2 / 8) * t_prefill
    assert pred.tpot_ms == pytest.approx(1.268224)
    assert pred.tpot_ms == pytest.approx(tpot * 1e3)
    assert pred.ttft_ms == pytest.approx((t_prefill + tpot) * 1e3)
    assert pred.output_throughput == pytest.approx(2 * 8 / (t_prefill + tpot + 7 * tpot))
    assert pred.memory_gib == pytest.approx((173056 + 10 * 16 * 256) / 2**30 + 0.5)
    assert pred.fits


def test_fp8_cache_and_one_chunk():
    base = Predictor(model_cost(CONFIG), SLOW)
    fp8 = base.ideal(SETTINGS | {"kv_cache_dtype": "fp8"}, LOAD)
    assert fp8.kv_capacity_tokens == 160  # the same blocks, half the bytes
    one_chunk = base.ideal(SETTINGS | {"max_num_batched_tokens": 16}, LOAD)
    assert one_chunk.ttft_ms < base.ideal(SETTINGS, LOAD).ttft_ms  # one weight read fewer


def test_refit_recovers_efficiency_and_overhead():
    predictor = Predictor(model_cost(CONFIG), SLOW)
    ideals = [predictor.ideal(SETTINGS | {"max_num_seqs": n}, Workload(16, 8, concurrency=n)) for n in (1, 4)]
    measured = [
        {
            "tpot_p99_ms": 3 * p.tpot_ms + 2,
            "ttft_p99_ms": 2 * p.ttft_ms,
            "output_throughput": None,
            "memory_gib": p.memory_gib + 1.0,
        }
        for p in ideals
    ]
    predictor.refit(list(zip(ideals, measured)))
    assert predictor.fit["tpot"] == pytest.approx((3.0, 2.0))
    assert predictor.fit["ttft"] == pytest.approx((2.0, 0.0))
    again = predictor.predict(SETTINGS | {"max_num_seqs": 4}, Workload(16, 8, concurrency=4))
    assert again.tpot_ms == pytest.approx(measured[1]["tpot_p99_ms"])
    assert again.memory_gib == pytest.approx(measured[1]["memory_gib"])


def test_line_fit_falls_back_to_a_ratio():
    assert line_fit([2.0], [6.0]) == (3.0, 0.0)
    assert line_fit([1.0, 2.0], [5.0, 4.0]) == (3.5, 0.0)  # a falling line: the median ratio (5 and 2)


def test_skips_what_cannot_fit_or_misses_the_slo():
    predictor = Predictor(model_cost(CONFIG), SLOW)
    small = predictor.predict(SETTINGS | {"num_kv_blocks": 1}, LOAD)
    assert predictor.skip_reason(small, {}) == "KV cache holds 16 tokens, fewer than one request's 24 (prompt + output)"
    pred = predictor.predict(SETTINGS, LOAD)
    assert predictor.skip_reason(pred, {"tpot": pred.tpot_ms}) is None  # within the unfitted margin
    assert "predicted tpot" in predictor.skip_reason(pred, {"tpot": pred.tpot_ms / 4})


def test_mape():
    assert mape([(110.0, 100.0), (45.0, 50.0)]) == pytest.approx(10.0)
    assert mape([]) is None


def test_hardware_from_datasheet_and_doctor(tmp_path):
    h200 = hardware_from_datasheet("NVIDIA H200")
    assert (h200.bandwidth_gbps, h200.tflops, h200.memory_gib, h200.is_gpu) == (4800, 989, 141, True)
    file = tmp_path / "doctor.json"
    file.write_text(
        '{"bench": {"device": {"name": "NVIDIA H200", "total_memory": 150323855360}, "results": ['
        '{"name": "d2d_copy", "value": 4100.0}, {"name": "matmul_bf16", "value": 700.0}]}}'
    )
    measured = hardware_from_doctor(file)
    assert (measured.bandwidth_gbps, measured.tflops, measured.memory_gib) == (4100.0, 700.0, 140.0)
    file.write_text('{"bench": {"results": []}}')
    with pytest.raises(ValueError, match="no d2d_copy and matmul_bf16"):
        hardware_from_doctor(file)
    with pytest.raises(ValueError, match="matches no datasheet"):
        hardware_from_datasheet("Voodoo 2")


def test_gpu_kv_capacity_comes_from_the_memory_plan():
    """On a GPU the predictor sizes the KV cache as modelio's memory plan does (the engine's rule)."""
    from model_optimizer.config import EngineConfig
    from model_optimizer.modelio.memory_plan import GpuMemory, plan_memory

    config = CONFIG | {"architectures": ["Qwen3ForCausalLM"], "model_type": "qwen3", "rms_norm_eps": 1e-6}
    h200 = hardware_from_datasheet("H200")
    settings = {"gpu_memory_utilization": 0.5, "max_num_seqs": 8, "max_num_batched_tokens": 1024}
    pred = Predictor(model_cost(config), h200, config=config).ideal(settings, LOAD)
    plan = plan_memory(config, GpuMemory(h200.name, int(h200.memory_gib * 2**30)), EngineConfig(**settings))
    assert pred.kv_capacity_tokens == plan.row("bf16", "auto").num_kv_blocks * 16 > 0
    assert pred.memory_gib == pytest.approx(0.5 * 141)


def test_closed_loop_beyond_max_num_seqs_waits_for_slots():
    """8 in flight, 2 run at once: each request first waits for 8 / 2 - 1 = 3 others to finish."""
    predictor = Predictor(model_cost(CONFIG), SLOW)
    settings = SETTINGS | {"max_num_seqs": 2}
    busy = predictor.ideal(settings, Workload(16, 8, concurrency=8))
    alone = predictor.ideal(settings, Workload(16, 8, concurrency=2))
    e2e = alone.ttft_ms + 7 * alone.tpot_ms
    assert busy.running == 2 and busy.tpot_ms == pytest.approx(alone.tpot_ms)
    assert busy.ttft_ms == pytest.approx(alone.ttft_ms + 3 * e2e)
    assert busy.output_throughput == pytest.approx(alone.output_throughput)  # the server's pace is the same
    assert "predicted ttft" in predictor.skip_reason(busy, {"ttft": alone.ttft_ms})
