"""What a user's review of `mopt top` found: an older vLLM's cache metrics (their gpu_ names) read as no
value; percentiles far from every request where the buckets are coarse, with no exact figure beside them;
and a pipe's lines giving all-time p99s under the names of the window's."""

from __future__ import annotations

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from model_optimizer.runtime.server.config import ServerConfig
from tests.optimizer.top.site import once_json, once_text, replaying
from tests.optimizer.top.test_top import VLLM, _top_process
from tests.runtime.server.live import start_server

M = 'model_name="m"'


def _older_vllm(queries: int, hits: int, *, renamed: bool = False) -> str:
    """/metrics of a vLLM before 0.10 (the gpu_ names only) or, `renamed`, of one exporting both names."""
    lines = [
        f"vllm:num_requests_running{{{M}}} 2",
        f"vllm:gpu_cache_usage_perc{{{M}}} 0.42",
        f"vllm:gpu_prefix_cache_queries_total{{{M}}} {queries}",
        f"vllm:gpu_prefix_cache_hits_total{{{M}}} {hits}",
    ]
    if renamed:  # the current names, read first: the deprecated ones are kept for old dashboards
        lines += [f"vllm:kv_cache_usage_perc{{{M}}} 0.3", f"vllm:prefix_cache_queries_total{{{M}}} {queries}"]
        lines += [f"vllm:prefix_cache_hits_total{{{M}}} {queries}"]
    return "\n".join(lines) + "\n"


def test_an_older_vllms_cache_metrics_are_read_under_their_former_names(capsys):
    with replaying([_older_vllm(100, 50), _older_vllm(300, 200)]) as site:
        code, view = once_json(capsys, site.url)
    assert code == 0 and view["kv_cache_usage"] == pytest.approx(0.42)
    assert view["prefix_hit_rate"] == pytest.approx(150 / 200)  # the window's hits over its lookups
    with replaying([_older_vllm(100, 50, renamed=True), _older_vllm(300, 200, renamed=True)]) as site:
        code, view = once_json(capsys, site.url)
    assert view["kv_cache_usage"] == pytest.approx(0.3) and view["prefix_hit_rate"] == pytest.approx(1.0)


def _mean(metrics: str, histogram: str) -> float:
    samples = {s.name: s.value for f in text_string_to_metric_families(metrics) for s in f.samples}
    return samples[histogram + "_sum"] / samples[histogram + "_count"]


def test_each_latency_shows_the_servers_exact_mean_beside_its_percentiles(tiny_model, capsys):
    """Three requests of a few milliseconds read "E2E p50 150.0 ms, queue p50 150.0 ms": every one fell in
    vLLM's first bucket (up to 0.3 s), whose middle the interpolation takes. _sum / _count is exact."""
    from model_optimizer import LLM

    llm = LLM(str(tiny_model("qwen3")), max_model_len=128, num_kv_blocks=64, max_num_seqs=8)
    live = start_server(llm, ServerConfig(served_model_name="tiny"))
    try:
        for prompt in ("one", "two", "three"):
            body = {"prompt": prompt, "max_tokens": 4, "ignore_eos": True}
            assert httpx.post(f"{live.url}/v1/completions", json=body, timeout=60).status_code == 200
        code, view = once_json(capsys, live.url)
        metrics = httpx.get(f"{live.url}/metrics", timeout=30).text
        _, panel = once_text(capsys, live.url)
    finally:
        live.stop()
    assert code == 0
    for key, histogram in (
        ("e2e", "vllm:e2e_request_latency_seconds"),
        ("queue", "vllm:request_queue_time_seconds"),
        ("ttft", "vllm:time_to_first_token_seconds"),
    ):
        row = view["latency"][key]
        assert row["window"] is False  # nothing finished between the scrapes: all time, as the mean
        assert row["mean"] == pytest.approx(_mean(metrics, histogram))
    header = next(line for line in panel.splitlines() if "p50" in line)
    assert "mean" in header.split()


def test_a_pipes_lines_name_all_time_latencies_apart_from_the_windows():
    """With nothing finished between two scrapes, a line said ttft_p99=... for the all-time figure."""
    with replaying(VLLM) as site:  # the second recording repeats: a third scrape sees no change
        top = _top_process(site.url)
        try:
            lines = [top.stdout.readline() for _ in range(3)]
        finally:
            top.kill()
            top.wait()
    first, moving, still = lines
    assert "ttft_p99_all_time=" in first and " ttft_p99=" not in first  # no window yet
    assert " ttft_p99=" in moving and "_all_time=" not in moving
    assert " e2e_p99_all_time=" in still and " e2e_p99=" not in still
