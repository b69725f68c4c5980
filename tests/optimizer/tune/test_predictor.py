"""The analytic predictor against figures computed by hand, its refit, and the candidates it skips."""

from __future__ import annotations

import math

import pytest

from model_optimizer.optimizer.tune.hardware import Hardware, hardware_from_datasheet, hardware_from_doctor
from model_optimizer.optimizer.tune.model_cost import model_cost
from model_optimizer.optimizer.tune.predictor import Predictor, Workload, mape
from model_optimizer.optimizer.tune.step_fit import step_ms

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
    # Gemma's classes tie by default: a config without the key holds one embedding, as the engine loads it
    gemma = {k: v for k, v in CONFIG.items() if k != "tie_word_embeddings"} | {"architectures": ["Gemma2ForCausalLM"]}
    assert model_cost(gemma).num_params == 2 * 36864 + 100 * 64
    assert model_cost(gemma | {"architectures": ["LlamaForCausalLM"]}).num_params == 2 * 36864 + 2 * 100 * 64


def test_model_cost_of_a_mixture_of_experts_by_hand():
    """Qwen3-MoE, 2 layers, the second dense (mlp_only_layers): 8 experts of 64 x 16, 2 per token."""
    moe = CONFIG | dict(
        architectures=["Qwen3MoeForCausalLM"],
        num_experts=8,
        num_experts_per_tok=2,
        moe_intermediate_size=16,
        mlp_only_layers=[1],
    )
    cost = model_cost(moe)
    attention, dense, experts, router = 64 * 64 * 2 + 2 * 64 * 32, 3 * 64 * 128, 8 * 3 * 64 * 16, 8 * 64
    assert cost.num_params == 2 * attention + dense + experts + router + 2 * 100 * 64
    assert cost.expert_params == experts and cost.expert_fraction == 2 / 8
    assert cost.active_linear_params == cost.linear_params - experts * 6 / 8  # 2 of 8 experts per token
    expert_bytes = 2 * experts
    assert cost.weight_bytes_read(1) == pytest.approx(cost.weight_bytes - expert_bytes * 0.75)
    assert cost.weight_bytes_read(10_000) == pytest.approx(cost.weight_bytes)  # every expert touched
    assert model_cost(CONFIG).weight_bytes_read(1) == model_cost(CONFIG).weight_bytes  # dense: all of it


def test_model_cost_of_deepseek_latent_attention_and_shared_experts_by_hand():
    """DeepSeek-V2-Lite's layout, 2 layers, the first dense: 4 heads of 16 + 8 (rope) query dims, v 16, a
    latent of 32 + 8 values; 8 experts of 64 x 16 (2 per token) and one shared expert of 16."""
    ds = CONFIG | dict(architectures=["DeepseekV2ForCausalLM"], kv_lora_rank=32, q_lora_rank=None)
    ds |= dict(qk_nope_head_dim=16, qk_rope_head_dim=8, v_head_dim=16, first_k_dense_replace=1)
    ds |= dict(n_routed_experts=8, num_experts_per_tok=2, moe_intermediate_size=16, n_shared_experts=1)
    cost = model_cost(ds)
    # q 64 x 4 x 24, kv_a 64 x 40, kv_b 32 x 4 x 32, o 4 x 16 x 64
    attention = 64 * 96 + 64 * 40 + 32 * 128 + 64 * 64
    dense, experts, router, shared = 3 * 64 * 128, 8 * 3 * 64 * 16, 8 * 64, 3 * 64 * 16
    assert cost.num_params == 2 * attention + dense + experts + router + shared + 2 * 100 * 64
    assert cost.expert_params == experts and cost.active_linear_params == cost.linear_params - experts * 6 / 8
    assert cost.kv_bytes_per_token == {"auto": 2 * 40 * 2, "fp8": 2 * 40}  # the latent row, not 2 x 4 heads
    assert cost.kv_bytes_per_gpu("auto", 2) == 2 * 40 * 2  # every GPU holds the whole row
    assert cost.attn_flops_per_ctx_token == 2 * 2 * 4 * (40 + 32)  # absorbed: scores over 40, values of 32
    assert model_cost(ds | {"q_lora_rank": 24}).num_params == cost.num_params + 2 * (64 * 24 + 24 * 96 - 64 * 96)


def _roof(decodes, prefill, ctx):
    """Roofline seconds of a step of the CONFIG model on SLOW, by hand: weights 173,056 B and 256 B of KV per
    token of context read once; 2 x 80,128 FLOPs per token plus 512 per token of context (attention):
    a decode sees `ctx` tokens, a token of a 16-token prompt 8 on average."""
    return (173056 + decodes * ctx * 256 + 2 * 80128 * (decodes + prefill) + 512 * (decodes * ctx + prefill * 8)) / 1e9


def test_ideal_figures_by_hand():
    pred = Predictor(model_cost(CONFIG), SLOW).ideal(SETTINGS, LOAD)
    # KV cache: 10 blocks x 16 tokens; running: the closed loop's 2 (under max_num_seqs 4)
    assert pred.kv_capacity_tokens == 160 and pred.running == 2
    f = pred.features
    # 2 / 8 requests start per step; a 16-token prompt beside 2 decodes in a budget of 8: 3 chunks of <= 6,
    # so a step carries a chunk with probability 1 - exp(-0.25 x 3)
    mixed = 1 - math.exp(-0.75)
    assert f["chunks"] == 3 and f["g"] == 1.0  # a CPU runs every step eagerly
    per_mixed = 0.25 * 16 / mixed  # prefill tokens a mixed step carries
    roof = mixed * _roof(2, per_mixed, 20) + (1 - mixed) * _roof(2, 0, 20)
    assert f["roof_ms"] == pytest.approx(roof * 1e3)
    # the prior on a CPU: 1.5 ms a layer a step, 0.2 ms a layer per running sequence, + 2 x the roofline
    fixed = 1.5 * 2 + 0.2 * 2 * 2
    tpot = fixed + 2 * roof * 1e3
    assert pred.tpot_ms == pytest.approx(tpot)
    assert pred.output_throughput == pytest.approx(2 * 1e3 / tpot)  # 2 tokens a step
    # start-up burst: 2 prompts x 16 tokens in steps of 8 = 4 steps; steady: a step + 3 chunk steps
    burst = 4 * (fixed + 2e3 * _roof(0, 8, 0))
    steady = tpot + 3 * (fixed + 2e3 * _roof(2, per_mixed, 20))
    assert f["burst_steps"] == 4
    assert pred.ttft_ms == pytest.approx(max(burst, steady))
    assert pred.memory_gib == pytest.approx((173056 + 10 * 16 * 256) / 2**30 + 0.5)
    assert pred.fits


def test_fp8_cache_and_a_larger_budget():
    base = Predictor(model_cost(CONFIG), SLOW)
    fp8 = base.ideal(SETTINGS | {"kv_cache_dtype": "fp8"}, LOAD)
    assert fp8.kv_capacity_tokens == 160  # the same blocks, half the bytes
    assert fp8.features["flag:kv_cache_dtype=fp8"] == 1.0 and "flag:block_size=16" not in fp8.features
    one_chunk = base.ideal(SETTINGS | {"max_num_batched_tokens": 32}, LOAD)
    assert one_chunk.features["burst_steps"] == 1 and one_chunk.features["chunks"] == 1
    assert one_chunk.ttft_ms < base.ideal(SETTINGS, LOAD).ttft_ms  # fewer steps before the first token


GPU = Hardware("gpu", bandwidth_gbps=1.0, tflops=1e-3, memory_gib=16.0, is_gpu=True, source="test")


def test_graphs_run_only_decode_steps_and_prefill_chunks_interfere():
    """With CUDA graphs only steps that carry a prefill chunk run eagerly; a smaller budget spreads a
    prompt over more steps, so more steps are eager and TPOT rises."""
    predictor = Predictor(model_cost(CONFIG), GPU)
    graphs = predictor.ideal(SETTINGS, LOAD)
    eager = predictor.ideal(SETTINGS | {"enforce_eager": True}, LOAD)
    assert graphs.features["g"] == pytest.approx(1 - math.exp(-0.75)) and eager.features["g"] == 1.0
    assert graphs.tpot_ms < eager.tpot_ms
    wide = predictor.ideal(SETTINGS | {"max_num_batched_tokens": 64}, LOAD)
    assert wide.features["g"] == pytest.approx(1 - math.exp(-0.25))
    assert wide.features["g"] < graphs.features["g"] and wide.tpot_ms < graphs.tpot_ms


def test_refit_recovers_the_step_coefficients():
    """Measurements made by known coefficients (2 ms a graph step, 20 ms an eager one, 3 x the roofline,
    +5 ms for block_size 32) are fitted back by least squares."""
    predictor = Predictor(model_cost(CONFIG), GPU)
    truth = {"o_step": 2.0, "o_eager": 18.0, "e": 3.0, "flag:block_size=32": 5.0}
    cases = [
        (SETTINGS, Workload(16, 8, concurrency=2)),
        (SETTINGS | {"enforce_eager": True}, Workload(16, 8, concurrency=4)),
        (SETTINGS | {"max_num_batched_tokens": 64}, Workload(16, 8, concurrency=1)),
        (SETTINGS | {"block_size": 32, "num_kv_blocks": 5}, Workload(16, 8, concurrency=2)),
        (SETTINGS | {"enforce_eager": True}, Workload(16, 4, concurrency=4)),
    ]
    ideals = [predictor.ideal(s, w) for s, w in cases]
    measured = []
    for p in ideals:
        step = step_ms(truth, p.features)
        measured.append(
            {
                "tpot_p99_ms": step,
                "ttft_p99_ms": 50.0,
                "output_throughput": 1e3 * p.running / step,
                "memory_gib": p.memory_gib + 1.0,
            }
        )
    predictor.refit(list(zip(ideals, measured)))
    for name, value in truth.items():
        assert predictor.fit["tpot"][name] == pytest.approx(value, rel=1e-2)
        assert predictor.fit["throughput"][name] == pytest.approx(value, rel=1e-2)
    again = predictor.predict(*cases[3])
    assert again.tpot_ms == pytest.approx(measured[3]["tpot_p99_ms"], rel=1e-3)
    assert again.output_throughput == pytest.approx(measured[3]["output_throughput"], rel=1e-3)
    assert again.memory_gib == pytest.approx(measured[3]["memory_gib"])


def test_an_unmeasured_setting_keeps_its_prior():
    """A flag no trial has tried costs nothing extra: the fit leaves it at 0 rather than guess."""
    predictor = Predictor(model_cost(CONFIG), GPU)
    p = predictor.ideal(SETTINGS, LOAD)
    predictor.refit([(p, {"tpot_p99_ms": 10.0, "output_throughput": 100.0})])
    fp8 = predictor.predict(SETTINGS | {"kv_cache_dtype": "fp8"}, LOAD)
    assert "flag:kv_cache_dtype=fp8" not in predictor.fit["tpot"]
    assert fp8.tpot_ms == pytest.approx(predictor.predict(SETTINGS, LOAD).tpot_ms, rel=0.05)


def _h200_trials():
    import json
    from pathlib import Path

    here = Path(__file__).parent
    data = json.loads((here / "h200_trials.json").read_text())
    root = here.parents[2]
    config = json.loads((root / "benchmarks/configs/qwen3-0.6b/config.json").read_text())
    hardware = hardware_from_doctor(root / "benchmarks/results/doctor_h200.json")
    return data["trials"], lambda: Predictor(model_cost(config), hardware, config=config)


def test_refitted_model_reproduces_the_recorded_h200_trials():
    """The five trials the first H200 study measured (Qwen3-0.6B, 64 in flight): each predicted from the
    other four (leave-one-out) within 15% on p99 TPOT and throughput. Trial 0 is left out of the check:
    it is the only one with CUDA graphs, so the other four say nothing of a graph step's cost."""
    trials, make = _h200_trials()
    ideal = make()
    pairs = []
    for t in trials:
        m = t["measured"]
        load = Workload(m["mean_prompt_len"], m["mean_output_len"], concurrency=64, num_requests=512)
        pairs.append((ideal.ideal(t["settings"], load), m))
    full = make()
    full.refit(pairs)
    for p, m in pairs:  # all five fitted together: within 15% too
        assert full.correct(p).tpot_ms == pytest.approx(m["tpot_p99_ms"], rel=0.15)
        assert full.correct(p).output_throughput == pytest.approx(m["output_throughput"], rel=0.15)
    for i, t in enumerate(trials):
        if t["number"] == 0:
            continue
        predictor = make()
        predictor.refit(pairs[:i] + pairs[i + 1 :])
        pred, m = predictor.correct(pairs[i][0]), pairs[i][1]
        assert pred.tpot_ms == pytest.approx(m["tpot_p99_ms"], rel=0.15), t["number"]
        assert pred.output_throughput == pytest.approx(m["output_throughput"], rel=0.15), t["number"]


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
    from model_optimizer.model.inspect.memory_plan import plan_memory
    from model_optimizer.model.inspect.plan_gpu import GpuMemory
    from model_optimizer.runtime.config import EngineConfig

    config = CONFIG | {"architectures": ["Qwen3ForCausalLM"], "model_type": "qwen3", "rms_norm_eps": 1e-6}
    h200 = hardware_from_datasheet("H200")
    settings = {"gpu_memory_utilization": 0.5, "max_num_seqs": 8, "max_num_batched_tokens": 1024}
    pred = Predictor(model_cost(config), h200, config=config).ideal(settings, LOAD)
    plan = plan_memory(config, GpuMemory(h200.name, int(h200.memory_gib * 2**30)), EngineConfig(**settings))
    assert pred.kv_capacity_tokens == plan.row("bf16", "auto").num_kv_blocks * 16 > 0
    assert pred.memory_gib == pytest.approx(0.5 * 141)


def test_a_prequantized_checkpoint_is_sized_in_its_own_format():
    """An AWQ checkpoint's plan holds only its int4 row: the predictor asked for "bf16", got nothing, and
    sized the weights as bf16 (Llama-3.1-70B: 131 GiB, against ~37 GiB loaded), so tune pruned trials that
    fit."""
    import json
    from pathlib import Path

    config = json.loads((Path(__file__).parents[3] / "benchmarks/configs/llama-3.1-70b/config.json").read_text())
    awq = config | {"quantization_config": {"quant_method": "awq", "bits": 4, "group_size": 128, "zero_point": True}}
    h200 = hardware_from_datasheet("H200")
    plain, quantized = model_cost(config), model_cost(awq)
    assert quantized.weight_bytes < 0.35 * plain.weight_bytes
    settings = {"gpu_memory_utilization": 0.9, "max_num_seqs": 8, "max_num_batched_tokens": 1024, "max_model_len": 8192}
    pred = Predictor(quantized, h200, config=awq).ideal(settings, LOAD)
    assert pred.kv_capacity_tokens > 0


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


def test_a_prediction_stored_by_the_earlier_predictor_is_left_as_it_was():
    """A resumed study may hold ideals without the step features: they are neither fitted nor corrected."""
    predictor = Predictor(model_cost(CONFIG), SLOW)
    old = predictor.ideal(SETTINGS, LOAD)
    old.features = {}
    assert predictor.correct(old).tpot_ms == old.tpot_ms
    predictor.refit([(old, {"tpot_p99_ms": 99.0, "output_throughput": 1.0})])
    assert predictor.fit["tpot"] == predictor.fit_prior()["tpot"]


def test_a_request_rate_keeps_as_many_running_as_littles_law_says():
    """At a rate, running = rate x time in the engine (O steps): well under max_num_seqs for a slow rate,
    and the throughput is the rate's output tokens."""
    predictor = Predictor(model_cost(CONFIG), SLOW)
    settings = SETTINGS | {"max_num_seqs": 64, "num_kv_blocks": 200}
    slow = predictor.ideal(settings, Workload(16, 8, request_rate=100.0))
    step_s = slow.tpot_ms / 1e3
    assert 1.0 < slow.running < 64
    assert slow.running == pytest.approx(100.0 * 8 * step_s, rel=1e-3)  # the fixed point
    assert slow.output_throughput == pytest.approx(100.0 * 8, rel=1e-3)  # the rate's tokens, not the peak
    flooded = predictor.ideal(settings, Workload(16, 8, request_rate=1e6))
    assert flooded.running == 64


def test_a_burst_the_trial_leaves_out_is_left_out_of_the_ttft():
    """Trials that count only requests after the closed loop's first wave never see the start-up burst in
    their p99 TTFT: the prediction drops it too (the steady path remains), and the study says so."""
    from model_optimizer.optimizer.bench.client import ClientConfig
    from model_optimizer.optimizer.bench.load import LoadConfig
    from model_optimizer.optimizer.bench.workloads import WorkloadConfig
    from model_optimizer.optimizer.tune.trial import TrialSetup
    from model_optimizer.optimizer.tune.tuner import workload_figures

    predictor = Predictor(model_cost(CONFIG), SLOW)
    burst = predictor.ideal(SETTINGS, Workload(16, 8, concurrency=4, num_requests=100))
    steady = predictor.ideal(SETTINGS, Workload(16, 8, concurrency=4, num_requests=100, burst_measured=False))
    assert burst.features["burst_counts"] == 1.0 and steady.features["burst_counts"] == 0.0
    assert steady.ttft_ms < burst.ttft_ms
    setup = TrialSetup(None, ClientConfig(), WorkloadConfig(prompt_len="16"), LoadConfig(concurrency=4))
    assert workload_figures(setup).burst_measured is True  # a study stored before the option
    setup.skip_first_wave = True
    assert workload_figures(setup).burst_measured is False


def test_the_cpu_prior_matches_our_engines_cpu_steps():
    """Before any trial, the predictor's step time on a CPU is within 1.5x of what our engine measured
    (benchmarks/cpu_engine_steps.py: CPU time per step of the built-in model, batch 1 to 64), with this
    CPU's matmul figures from environment/cpu_speed.py. An assumed 20 GB/s and 1 ms a step predicted
    291 tok/s where 12 were measured."""
    import json
    from pathlib import Path

    from model_optimizer.assets import REFERENCE_MODEL_DIR

    root = Path(__file__).resolve().parents[3]
    recorded = json.loads((root / "benchmarks" / "results" / "cpu_engine_steps.json").read_text())
    speed = recorded["cpu_speed"]
    cpu = Hardware("cpu", speed["decode_gbps"], speed["gflops"] / 1e3, 16.0, False, "recorded")
    config = json.loads((Path(REFERENCE_MODEL_DIR) / "config.json").read_text())
    predictor = Predictor(model_cost(config, recorded["model"]["dtype"]), cpu)
    for step in recorded["steps"]:
        load = Workload(prompt_len=4, output_len=recorded["num_tokens"], concurrency=step["batch"])
        predicted = predictor.predict({}, load).tpot_ms
        assert 1 / 1.5 < predicted / step["cpu_ms_per_step"] < 1.5, (step, predicted)


def test_a_cpu_is_known_by_its_measured_matmuls(tmp_path, monkeypatch):
    import json

    import torch

    from model_optimizer.environment import cpu_speed as cs
    from model_optimizer.optimizer.tune.hardware import detect_hardware

    if torch.cuda.is_available():
        pytest.skip("the visible GPU's datasheet wins")
    monkeypatch.setenv("MOPT_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(cs, "_seen", {})
    entry = cs.CpuSpeed("float32", 2, cs.cpu_model_name(), cs.usable_cores(), torch.__version__, gflops=55.0)
    entry.decode_gbps = 12.5
    (tmp_path / cs.CACHE_FILE).write_text(
        json.dumps({"schema": cs.SCHEMA, "entries": {cs.cache_key(): entry.to_dict()}})
    )
    hardware = detect_hardware()
    assert (hardware.bandwidth_gbps, hardware.tflops, hardware.is_gpu) == (12.5, 0.055, False)
    assert "measured on this CPU" in hardware.source and "2 threads, float32" in hardware.name


def test_a_trial_that_quantizes_at_load_is_sized_and_read_in_its_format():
    """`quantization: rtn-int4` in a trial's settings loads ~4x smaller weights: the predictor sized and read
    them in bf16, so Llama-3.1-70B (131 GiB bf16) was pruned on an H200 as "the weights alone exceed the
    memory budget" or as holding no KV cache although its int4 weights (~37 GiB) fit, and int4's decode was predicted as slow as bf16's."""
    import json
    from pathlib import Path

    from model_optimizer.model.inspect.memory_plan import plan_memory
    from model_optimizer.model.inspect.plan_gpu import GpuMemory
    from model_optimizer.runtime.config import EngineConfig

    config = json.loads((Path(__file__).parents[3] / "benchmarks/configs/llama-3.1-70b/config.json").read_text())
    h200 = hardware_from_datasheet("H200")
    predictor = Predictor(model_cost(config), h200, config=config)
    settings = {"gpu_memory_utilization": 0.9, "max_num_seqs": 8, "max_num_batched_tokens": 1024, "max_model_len": 8192}
    plain = predictor.ideal(settings, LOAD)
    assert not plain.fits
    int4 = predictor.ideal(settings | {"quantization": "rtn-int4"}, LOAD)
    assert int4.fits, int4.reason
    gpu = GpuMemory(h200.name, int(h200.memory_gib * 2**30))
    plan = plan_memory(config, gpu, EngineConfig(**settings))
    assert int4.kv_capacity_tokens == plan.row("int4", "auto").num_kv_blocks * 16 > 0
    fp8 = predictor.ideal(settings | {"quantization": "fp8"}, LOAD)
    assert fp8.fits and fp8.kv_capacity_tokens == plan.row("fp8", "auto").num_kv_blocks * 16
    assert int4.features["roof_ms"] < fp8.features["roof_ms"] < 0.6 * plain.features["roof_ms"]
