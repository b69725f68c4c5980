"""Server /metrics parsing, GPU telemetry fallback and client-overhead accounting."""

import asyncio

import pytest

from model_optimizer.optimizer.bench.client import RequestRecord
from model_optimizer.optimizer.bench.overhead import LoopLagMonitor, overhead_report
from model_optimizer.optimizer.bench.scrape import MetricsScraper, parse_metrics, pick, summarize_scrapes
from model_optimizer.optimizer.bench.telemetry import GpuSampler, is_local, summarize_gpu_samples

BEFORE = """# HELP vllm:num_preemptions_total Preemptions.
# TYPE vllm:num_preemptions_total counter
vllm:num_preemptions_total{model_name="a",engine="0"} 3
vllm:num_preemptions_total{model_name="a",engine="1"} 4
# TYPE vllm:kv_cache_usage_perc gauge
vllm:kv_cache_usage_perc{model_name="a"} 0.10
# TYPE vllm:prefix_cache_queries_total counter
vllm:prefix_cache_queries_total 100
vllm:prefix_cache_hits_total 10
"""
DURING = "vllm:kv_cache_usage_perc 0.9\n"
AFTER = BEFORE.replace(" 3\n", " 5\n").replace("0.10", "0.2").replace(" 100\n", " 300\n").replace(" 10\n", " 110\n")


def test_parse_sums_label_sets_and_matches_by_suffix():
    values = parse_metrics(BEFORE)
    assert pick(values, "num_preemptions_total") == 7
    assert pick(values, "kv_cache_usage_perc") == pytest.approx(0.1)
    assert pick(values, "num_requests_running") is None


def test_summary_of_scrapes():
    out = summarize_scrapes([parse_metrics(BEFORE), parse_metrics(DURING), parse_metrics(AFTER)])
    assert out["preemptions"] == 2
    assert out["prefix_cache_hit_rate"] == pytest.approx(100 / 200)
    assert out["kv_cache_usage_max"] == pytest.approx(0.9)
    assert out["gauges"]["kv_cache_usage_perc"]["after"] == pytest.approx(0.2)
    assert summarize_scrapes([], "GET /metrics returned HTTP 404") == {
        "available": False,
        "reason": "GET /metrics returned HTTP 404",
    }


def test_missing_metrics_endpoint_is_tolerated(server):
    async def go():
        scraper = MetricsScraper(server.base_url + "/nowhere", interval=0.01)
        await scraper.start()
        await asyncio.sleep(0.05)
        return await scraper.stop()

    out = asyncio.run(go())
    assert out["available"] is False and "404" in out["reason"]


def test_gpu_telemetry_skips_without_nvml_or_remote_server():
    assert is_local("http://127.0.0.1:8000") and is_local("http://localhost:1")
    assert not is_local("http://10.1.2.3:8000")
    sampler = GpuSampler()
    started = sampler.start()
    out = sampler.stop()
    if not started:  # this machine has no NVIDIA driver
        assert out["available"] is False and out["reason"].startswith("NVML unavailable")
    else:
        assert out["available"] is True and out["gpus"]


def test_gpu_sample_summary():
    ticks = [
        [{"util_pct": 50.0, "power_w": 300.0}, {"util_pct": 0.0}],
        [{"util_pct": 100.0, "power_w": 500.0}, {"util_pct": 10.0}],
    ]
    out = summarize_gpu_samples(ticks, 2)
    assert out["gpus"][0]["util_pct"] == {"mean": 75.0, "max": 100.0}
    assert out["gpus"][0]["power_w"]["mean"] == 400.0 and "power_w" not in out["gpus"][1]
    assert out["num_samples"] == 2


def test_overhead_warns_when_the_client_lags():
    recs = [RequestRecord(i, 1, 1, scheduled=0.0, send=0.002) for i in range(50)]
    loop = {"loop_lag_ms": {"p99": 1.0}, "cpu_per_wall_s": 0.2, "wall_s": 5.0}
    assert overhead_report(recs, loop)["warnings"] == []
    recs[-1].send = 0.5
    warned = overhead_report(recs, loop | {"cpu_per_wall_s": 0.97})["warnings"]
    assert any("send lag" in w for w in warned) and any("CPU" in w for w in warned)
    short = overhead_report(recs, loop | {"cpu_per_wall_s": 0.97, "wall_s": 0.1})["warnings"]
    assert not any("CPU" in w for w in short)  # start-up noise of a tiny run is no warning
    assert any("event-loop" in w for w in overhead_report(recs, loop | {"loop_lag_ms": {"p99": 25.0}})["warnings"])


def test_loop_lag_monitor_sees_a_blocked_loop():
    import time

    async def go():
        monitor = LoopLagMonitor(interval=0.005)
        monitor.start()
        await asyncio.sleep(0.03)
        time.sleep(0.1)  # block the loop: the monitor must notice
        await asyncio.sleep(0.02)
        return await monitor.stop()

    out = asyncio.run(go())
    assert out["loop_lag_ms"]["max"] >= 80


SPEC_BEFORE = """# TYPE vllm:spec_decode_num_drafts counter
vllm:spec_decode_num_drafts_total{model_name="a"} 10
vllm:spec_decode_num_draft_tokens_total{model_name="a"} 40
vllm:spec_decode_num_accepted_tokens_total{model_name="a"} 20
"""
SPEC_AFTER = SPEC_BEFORE.replace(" 10\n", " 30\n").replace(" 40\n", " 120\n").replace(" 20\n", " 50\n")


def test_summary_reports_speculative_decoding_when_the_server_exports_it():
    out = summarize_scrapes([parse_metrics(SPEC_BEFORE), parse_metrics(SPEC_AFTER)])
    assert out["spec_decode_mean_acceptance_length"] == pytest.approx(1 + 30 / 20)
    assert out["spec_decode_acceptance_rate"] == pytest.approx(30 / 80)
    assert "spec_decode_mean_acceptance_length" not in summarize_scrapes([parse_metrics(BEFORE), parse_metrics(AFTER)])


def test_metrics_are_parsed_off_the_event_loop(server, monkeypatch):
    """Parsing a vLLM-sized /metrics page takes about 16 ms of pure Python: on the event loop that timing
    chunks it would delay their timestamps, so every page is parsed in another thread."""
    import threading

    from model_optimizer.optimizer.bench import scrape

    parsed_on: list[int] = []

    def recording_parse(text: str) -> dict[str, float]:
        parsed_on.append(threading.get_ident())
        return parse_metrics(text)

    monkeypatch.setattr(scrape, "parse_metrics", recording_parse)

    async def go():
        scraper = MetricsScraper(server.base_url, interval=0.01)
        await scraper.start()
        while len(parsed_on) < 3:  # the start's scrape and two during the "run"
            await asyncio.sleep(0.01)
        return await scraper.stop(), threading.get_ident()

    out, loop_thread = asyncio.run(go())
    assert out["available"] is True and out["num_scrapes"] >= 3  # start, during, stop
    assert loop_thread not in parsed_on
