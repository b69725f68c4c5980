"""`mopt bench` end to end against our own server: the figures it reports agree with the server's."""

from __future__ import annotations

import json

import httpx

from model_optimizer.cli.main import main
from tests.server.live import metric


def test_bench_measures_our_server(server, tmp_path):
    before = metric(httpx.get(f"{server.url}/metrics").text, "vllm:generation_tokens_total")
    rc = main(["bench", "--base-url", server.url, "--output-dir", str(tmp_path), "--no-progress",
               "--prompt-len", "16", "--output-len", "8", "--num-requests", "12", "--concurrency", "4",
               "--random-vocab-size", "900"])  # the tiny model has about 1,000 tokens
    assert rc == 0
    [run] = sorted(tmp_path.glob("run-*.json"))
    result = json.loads(run.read_text())
    summary = result["summary"]
    assert summary["num_ok"] == 12 and summary["output_tokens"] == 12 * 8
    assert 0 < summary["ttft_ms"]["p50"] <= summary["e2e_ms"]["p50"]
    after = metric(httpx.get(f"{server.url}/metrics").text, "vllm:generation_tokens_total")
    assert after - before == summary["output_tokens"]  # the server counted what the client measured
    assert result["config"]["client"]["model"] == "tiny"
    free = metric(httpx.get(f"{server.url}/metrics").text, "mopt:kv_cache_free_blocks")
    assert free == metric(httpx.get(f"{server.url}/metrics").text, "mopt:kv_cache_total_blocks")
