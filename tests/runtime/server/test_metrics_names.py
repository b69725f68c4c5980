"""/metrics carries vLLM's metric names and label sets, so vLLM dashboards and alerts work on our server.

The list below is vLLM's v1 Prometheus logger (names, types, labels other than its `engine` label), written
down once here; a live server is scraped after real requests and each name must be there with the
`model_name` label and the right type.
"""

from __future__ import annotations

import httpx
from prometheus_client.parser import text_string_to_metric_families

from tests.runtime.server.live import metric

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
    "vllm:time_per_output_token_seconds": "histogram",
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


def _families(url: str) -> dict:
    return {f.name: f for f in text_string_to_metric_families(httpx.get(f"{url}/metrics").text)}


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
    for name in (
        "vllm:request_queue_time_seconds",
        "vllm:request_prefill_time_seconds",
        "vllm:request_decode_time_seconds",
        "vllm:request_inference_time_seconds",
        "vllm:time_per_output_token_seconds",
        "vllm:request_prompt_tokens",
        "vllm:request_generation_tokens",
    ):
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
    handlers = {s.labels["handler"] for s in _families(server.url)["http_requests"].samples}
    assert {"/tokenize", "/v1/models/{id}"} <= handlers
    assert not any(h.startswith("/v1/models/") and h != "/v1/models/{id}" for h in handlers)
