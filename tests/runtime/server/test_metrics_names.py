"""/metrics carries vLLM's metric names, label sets, buckets and meanings, so vLLM dashboards and alerts work
on our server, and a fleet of both sums.

The lists below are vLLM 0.14's v1 Prometheus logger (vllm/v1/metrics/loggers.py: names, types, labels other
than its `engine` label, bucket bounds), written down once here; a live server is scraped around real requests
and each value must move as vLLM's does.
"""

from __future__ import annotations

import math

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from model_optimizer.runtime.config import EngineConfig
from model_optimizer.runtime.server.config import ServerConfig
from tests.runtime.server.conftest import ENGINE_ARGS
from tests.runtime.server.live import metric, start_server, wait_for

VLLM_METRICS = {
    "vllm:num_requests_running": "gauge",
    "vllm:num_requests_waiting": "gauge",
    "vllm:kv_cache_usage_perc": "gauge",
    "vllm:gpu_cache_usage_perc": "gauge",
    "vllm:prefix_cache_queries": "counter",
    "vllm:prefix_cache_hits": "counter",
    "vllm:num_preemptions": "counter",
    "vllm:prompt_tokens": "counter",
    "vllm:generation_tokens": "counter",
    "vllm:request_success": "counter",
    "vllm:time_to_first_token_seconds": "histogram",
    "vllm:request_time_per_output_token_seconds": "histogram",
    "vllm:inter_token_latency_seconds": "histogram",
    "vllm:e2e_request_latency_seconds": "histogram",
    "vllm:request_queue_time_seconds": "histogram",
    "vllm:request_inference_time_seconds": "histogram",
    "vllm:request_prefill_time_seconds": "histogram",
    "vllm:request_decode_time_seconds": "histogram",
    "vllm:request_prompt_tokens": "histogram",
    "vllm:request_generation_tokens": "histogram",
    "vllm:request_params_n": "histogram",
}
NOT_IN_VLLM = ("vllm:time_per_output_token_seconds",)
"""Deprecated in vLLM 0.11 and hidden from 0.12 (vllm-project/vllm#32661 then removed it): 0.14 exports it only
with --show-hidden-metrics-for-version, and then per engine step, not per request."""

REQUEST_LATENCY = (0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0, 60.0, 120.0, 240.0)
REQUEST_LATENCY += (480.0, 960.0, 1920.0, 7680.0)
PER_TOKEN = (0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0)
VLLM_BUCKETS = {
    "vllm:time_to_first_token_seconds": (0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0)
    + (2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0, 160.0, 640.0, 2560.0),
    "vllm:inter_token_latency_seconds": PER_TOKEN,
    "vllm:request_time_per_output_token_seconds": PER_TOKEN,
    "vllm:e2e_request_latency_seconds": REQUEST_LATENCY,
    "vllm:request_queue_time_seconds": REQUEST_LATENCY,
    "vllm:request_inference_time_seconds": REQUEST_LATENCY,
    "vllm:request_prefill_time_seconds": REQUEST_LATENCY,
    "vllm:request_decode_time_seconds": REQUEST_LATENCY,
}
"""vLLM 0.14's bucket bounds (its loggers.py has the same lists from v0.8 to releases after 0.14)."""

PER_COMPLETION = (
    "vllm:e2e_request_latency_seconds",
    "vllm:time_to_first_token_seconds",
    "vllm:request_queue_time_seconds",
    "vllm:request_prefill_time_seconds",
    "vllm:request_decode_time_seconds",
    "vllm:request_inference_time_seconds",
    "vllm:request_time_per_output_token_seconds",
    "vllm:request_prompt_tokens",
    "vllm:request_generation_tokens",
)
"""Observed once per completion, as vLLM observes each of an n > 1 request's child requests."""


def _families(url: str) -> dict:
    return {f.name: f for f in text_string_to_metric_families(httpx.get(f"{url}/metrics").text)}


def _values(url: str) -> dict[str, float]:
    """Sample name (with its labels other than model_name, as `name{k=v}`) -> value."""
    values = {}
    for family in _families(url).values():
        for s in family.samples:
            labels = ",".join(f"{k}={v}" for k, v in sorted(s.labels.items()) if k != "model_name")
            values[s.name + (f"{{{labels}}}" if labels else "")] = s.value
    return values


def _moved(url: str, body: dict) -> dict[str, float]:
    """How much each sample moved over one finished /v1/completions request (a stream read to its end)."""
    before = _values(url)
    with httpx.stream("POST", f"{url}/v1/completions", json=body, timeout=60) as r:
        assert r.status_code == 200, r.read()
        r.read()
    after = _values(url)
    return {name: value - before.get(name, 0.0) for name, value in after.items()}


def test_every_vllm_metric_is_exported_with_the_model_name_label(server):
    r = httpx.post(
        f"{server.url}/v1/completions",
        json={"prompt": "metrics names", "max_tokens": 4, "ignore_eos": True},
        timeout=60,
    )
    assert r.status_code == 200
    families = _families(server.url)
    for name, kind in VLLM_METRICS.items():
        assert name in families, f"{name} is missing from /metrics"
        family = families[name]
        assert family.type == kind, f"{name} is a {family.type}, vLLM's is a {kind}"
        assert family.samples, name
        assert all(s.labels.get("model_name") == "tiny" for s in family.samples), name


def test_request_phase_histograms_count_finished_requests(server):
    before = httpx.get(f"{server.url}/metrics").text
    r = httpx.post(
        f"{server.url}/v1/completions", json={"prompt": "phases", "max_tokens": 3, "ignore_eos": True}, timeout=60
    )
    assert r.status_code == 200
    after = httpx.get(f"{server.url}/metrics").text
    for name in PER_COMPLETION:
        assert metric(after, name + "_count") - metric(before, name + "_count") >= 1, name
    generated = metric(after, "vllm:request_generation_tokens_sum") - metric(
        before, "vllm:request_generation_tokens_sum"
    )
    assert generated >= 3


def test_http_requests_are_counted_by_status(server):
    httpx.get(f"{server.url}/v1/models")
    httpx.post(f"{server.url}/v1/completions", json={"prompt": "x", "max_tokens": "many"})
    samples = [s for s in _families(server.url)["http_requests"].samples if s.name == "http_requests_total"]
    by_key = {(s.labels["handler"], s.labels["method"], s.labels["status"]): s.value for s in samples}
    assert by_key[("/v1/models", "GET", "200")] >= 1
    assert by_key[("/v1/completions", "POST", "400")] >= 1


def test_unknown_paths_share_one_handler_label(server):
    for path in ("/no/such/a", "/no/such/b"):
        assert httpx.get(f"{server.url}{path}").status_code == 404
    handlers = {s.labels["handler"] for s in _families(server.url)["http_requests"].samples}
    assert "other" in handlers and not any(h.startswith("/no/such") for h in handlers)


def test_request_params_n_counts_completions_per_request(server):
    before = httpx.get(f"{server.url}/metrics").text
    r = httpx.post(f"{server.url}/v1/completions", json={"prompt": "n", "max_tokens": 2, "n": 3}, timeout=60)
    assert r.status_code == 200
    after = httpx.get(f"{server.url}/metrics").text
    assert metric(after, "vllm:request_params_n_count") - metric(before, "vllm:request_params_n_count") == 1
    assert metric(after, "vllm:request_params_n_sum") - metric(before, "vllm:request_params_n_sum") == 3


def test_tokenize_and_model_routes_have_their_own_handler_labels(server):
    httpx.post(f"{server.url}/tokenize", json={"prompt": "hello"})
    for model_id in ("tiny", "no-such-model"):
        httpx.get(f"{server.url}/v1/models/{model_id}")
    for response_id in ("resp_a", "resp_b"):  # nothing is stored: 404s, under one label
        httpx.get(f"{server.url}/v1/responses/{response_id}")
    handlers = {s.labels["handler"] for s in _families(server.url)["http_requests"].samples}
    assert {"/tokenize", "/v1/models/{id}", "/v1/responses/{id}"} <= handlers
    for route in ("/v1/models/", "/v1/responses/"):
        assert not any(h.startswith(route) and h != route + "{id}" for h in handlers)


def test_names_vllm_no_longer_exports_are_not_exported(server):
    families = _families(server.url)
    assert not [name for name in NOT_IN_VLLM if name in families]


def test_latency_histograms_have_vllms_buckets(server):
    """Exactly vLLM's bounds: `sum by (le)` over a fleet of both servers needs the same `le` set, and a long
    request must not land in +Inf where vLLM's buckets still see it."""
    families = _families(server.url)
    for name, bounds in VLLM_BUCKETS.items():
        les = [float(s.labels["le"]) for s in families[name].samples if s.name == name + "_bucket"]
        assert les == [*bounds, math.inf], name


def test_length_histograms_stop_at_max_model_len(server):
    """vLLM's 1-2-5 token buckets end at the model's context (ENGINE_ARGS: 128), then +Inf."""
    families = _families(server.url)
    for name in ("vllm:request_prompt_tokens", "vllm:request_generation_tokens"):
        les = [float(s.labels["le"]) for s in families[name].samples if s.name == name + "_bucket"]
        assert les == [1, 2, 5, 10, 20, 50, 100, math.inf], name


def test_prompt_tokens_count_each_completions_whole_prompt_once(server):
    """vllm:prompt_tokens_total is vLLM's: the prompt of each completion, cached or not; the tokens the engine
    computed (prefix-cache hits left out) are mopt:prompt_tokens_computed_total."""
    prompt = [900 + i for i in range(40)]  # two full blocks of 16 for the prefix cache
    body = {"prompt": prompt, "max_tokens": 2, "ignore_eos": True}
    first, again = _moved(server.url, body), _moved(server.url, body)
    assert first["vllm:prompt_tokens_total"] == again["vllm:prompt_tokens_total"] == 40
    assert first["mopt:prompt_tokens_computed_total"] == 40 and first["vllm:prefix_cache_hits_total"] == 0
    assert again["vllm:prefix_cache_hits_total"] == 32
    assert again["mopt:prompt_tokens_computed_total"] == 40 - 32
    three = _moved(server.url, {**body, "n": 3, "temperature": 1.0})
    assert three["vllm:prompt_tokens_total"] == 3 * 40


@pytest.mark.parametrize("stream", [False, True])
def test_per_request_histograms_observe_each_completion(server, stream):
    body = {"prompt": [800 + i for i in range(5)], "max_tokens": 4, "n": 3, "temperature": 1.0, "ignore_eos": True}
    moved = _moved(server.url, {**body, "stream": stream})
    for name in PER_COMPLETION:
        assert moved[name + "_count"] == 3, name
    assert moved["vllm:request_prompt_tokens_sum"] == 3 * 5
    assert moved["vllm:request_generation_tokens_sum"] == 3 * 4
    assert moved["vllm:request_success_total{finished_reason=length}"] == 3
    assert moved["vllm:request_params_n_count"] == 1  # vLLM's too: once per request


def test_every_finish_reason_has_a_series_before_its_first_request(server):
    """As vLLM's logger makes one per FinishReason up front: rate() and alerts see 0, not a missing series."""
    samples = _families(server.url)["vllm:request_success"].samples
    reasons = {s.labels["finished_reason"] for s in samples if s.name == "vllm:request_success_total"}
    assert {"stop", "length", "abort", "error"} <= reasons


@pytest.fixture(scope="module")
def untouched_server(tiny_model):
    """A server whose engine core runs (and was warmed up) in its own process, as `mopt serve` runs it, and
    that no request reaches."""
    engine_config = EngineConfig(model=str(tiny_model("qwen3")), **ENGINE_ARGS)
    live = start_server(None, ServerConfig(served_model_name="tiny"), engine_config=engine_config)
    yield live
    live.stop()


@pytest.mark.slow
def test_the_start_up_warm_up_counts_in_no_counter(untouched_server):
    state = untouched_server.state
    wait_for(lambda: state.engine is not None and state.engine.stats is not None, "the core reports its stats")
    text = httpx.get(f"{untouched_server.url}/metrics").text
    for name in (
        "vllm:prefix_cache_queries_total",
        "vllm:prefix_cache_hits_total",
        "vllm:prompt_tokens_total",
        "vllm:generation_tokens_total",
        "mopt:prompt_tokens_computed_total",
        "mopt:engine_steps_total",
    ):
        assert metric(text, name) == 0, name
