"""LLM.get_metrics(), vLLM's offline metrics API, on the tiny Qwen3 with n-gram proposals: the loop of vLLM's
examples/offline_inference/spec_decode.py runs on it and its sums are the engine's stats; the per-position
acceptance counter has all k positions from the start, offline and on the server's /metrics; and an engine
served by the real server reads the same names and values offline as /metrics gives (read into the same
shapes, histograms included)."""

from __future__ import annotations

from dataclasses import replace

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from model_optimizer import LLM, SamplingParams
from model_optimizer.runtime.llm_metrics import Counter, Gauge, Histogram, Metric, Vector, read_metrics
from model_optimizer.runtime.server.config import ServerConfig
from tests.runtime.server.live import start_server, wait_for

K = 3
SPEC = {"method": "ngram", "num_speculative_tokens": K, "adaptive": False}
ENGINE_ARGS = dict(max_model_len=128, kv_cache_memory=1 << 24)
PROMPTS = [[7, 8, 9, 10] * 6, [100, 200] * 9 + [300], [5, 17, 901, 33, 2]]
"""Two repetitive prompts (n-gram proposals are often right) and a random one."""
GREEDY = SamplingParams(temperature=0, max_tokens=24, ignore_eos=True)


def by_name(metrics: list[Metric]) -> dict[str, Metric]:
    return {m.name: m for m in metrics}


def vllm_example_sums(metrics: list[Metric]) -> dict:
    """The loop of vLLM's spec_decode.py example, as it reads `llm.get_metrics()`."""
    num_drafts = num_draft_tokens = num_accepted_tokens = 0
    acceptance_counts = [0] * K
    for metric in metrics:
        if metric.name == "vllm:spec_decode_num_drafts":
            assert isinstance(metric, Counter)
            num_drafts += metric.value
        elif metric.name == "vllm:spec_decode_num_draft_tokens":
            assert isinstance(metric, Counter)
            num_draft_tokens += metric.value
        elif metric.name == "vllm:spec_decode_num_accepted_tokens":
            assert isinstance(metric, Counter)
            num_accepted_tokens += metric.value
        elif metric.name == "vllm:spec_decode_num_accepted_tokens_per_pos":
            assert isinstance(metric, Vector)
            for pos in range(len(metric.values)):
                acceptance_counts[pos] += metric.values[pos]
    return {
        "num_drafts": num_drafts,
        "num_draft_tokens": num_draft_tokens,
        "num_accepted_tokens": num_accepted_tokens,
        "acceptance_counts": acceptance_counts,
    }


def offline_engine_part(served: list[Metric], llm: LLM) -> tuple[list[Metric], list[Metric]]:
    """`llm.get_metrics()` and the series of `served` under its names, model_name labels dropped (the server's
    is its served name, the offline one the model's path)."""

    def unlabelled(metrics: list[Metric]) -> list[Metric]:
        return [replace(m, labels={k: v for k, v in m.labels.items() if k != "model_name"}) for m in metrics]

    offline = llm.get_metrics()
    names = {m.name for m in offline}
    return unlabelled(offline), unlabelled([m for m in served if m.name in names])


def test_vllm_spec_decode_example_loop_reads_the_engines_counts(tiny_model):
    llm = LLM(str(tiny_model("qwen3")), speculative_config=SPEC, **ENGINE_ARGS)
    before = by_name(llm.get_metrics())["vllm:spec_decode_num_accepted_tokens_per_pos"]
    assert before.values == [0] * K  # every position from the start, as vLLM exports them
    outputs = llm.generate(PROMPTS, GREEDY, use_tqdm=False)
    sums = vllm_example_sums(llm.get_metrics())
    stats = llm.engine.stats()
    assert sums == {
        "num_drafts": stats.spec_num_drafts,
        "num_draft_tokens": stats.spec_num_draft_tokens,
        "num_accepted_tokens": stats.spec_num_accepted_tokens,
        "acceptance_counts": stats.spec_accepted_per_pos + [0] * (K - len(stats.spec_accepted_per_pos)),
    }
    assert 0 < sums["num_accepted_tokens"] < sums["num_draft_tokens"]
    assert sum(sums["acceptance_counts"]) == sums["num_accepted_tokens"]
    metrics = by_name(llm.get_metrics())
    assert (
        metrics["vllm:generation_tokens"].value
        == stats.num_generation_tokens
        == sum(len(o.outputs[0].token_ids) for o in outputs)
    )
    assert metrics["vllm:num_requests_running"] == Gauge(
        "vllm:num_requests_running", {"model_name": llm.config.model}, 0.0
    )
    assert metrics["mopt:kv_cache_total_blocks"].value == stats.num_blocks
    llm.close()
    with pytest.raises(ValueError, match="closed"):
        llm.get_metrics()


def test_no_spec_decode_counters_without_speculation(qwen3_llm):
    names = {m.name for m in qwen3_llm.get_metrics()}
    assert {"vllm:num_requests_running", "vllm:kv_cache_usage_perc", "vllm:prefix_cache_hits"} <= names
    assert not [name for name in names if "spec_decode" in name]  # as vLLM: only an engine that speculates


def served_metrics(url: str) -> list[Metric]:
    """The server's /metrics, read into get_metrics' shapes."""
    return read_metrics(text_string_to_metric_families(httpx.get(f"{url}/metrics").text))


def test_offline_metrics_are_the_servers_for_the_same_engine(tiny_model):
    llm = LLM(str(tiny_model("qwen3")), speculative_config=SPEC, **ENGINE_ARGS)
    live = start_server(llm, ServerConfig(served_model_name="tiny"))
    try:
        per_pos = by_name(served_metrics(live.url))["vllm:spec_decode_num_accepted_tokens_per_pos"]
        assert per_pos == Vector(per_pos.name, {"model_name": "tiny"}, [0] * K)  # before any proposal
        for prompt in PROMPTS:
            body = {"model": "tiny", "prompt": prompt, "max_tokens": 24, "temperature": 0, "ignore_eos": True}
            assert httpx.post(f"{live.url}/v1/completions", json=body, timeout=120).status_code == 200

        def same() -> bool:
            offline, from_server = offline_engine_part(served_metrics(live.url), llm)
            return offline == from_server

        wait_for(same, "/metrics shows the engine's state after the last step")
        served = served_metrics(live.url)
        offline, from_server = offline_engine_part(served, llm)
    finally:
        live.stop()
    assert offline == from_server
    assert vllm_example_sums(served)["num_accepted_tokens"] > 0
    e2e = by_name(served)["vllm:e2e_request_latency_seconds"]  # a histogram: the server's only
    assert isinstance(e2e, Histogram) and e2e.count == e2e.buckets["+Inf"] == len(PROMPTS)
    assert "vllm:e2e_request_latency_seconds" not in {m.name for m in offline}
