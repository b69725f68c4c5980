"""benchmarks/serving.py end to end on the CPU: a real `mopt serve` subprocess with a tiny model,
`mopt bench` at rate inf without and with logprobs, a short sweep, and the JSON it writes.
A smoke test: it asserts the runs completed and the fields exist, never how fast they were."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[3]


@pytest.mark.slow
def test_serving_benchmark_writes_throughput_and_latency_percentiles(tiny_model, tmp_path):
    out = tmp_path / "serving.json"
    cmd = [sys.executable, str(REPO / "benchmarks" / "serving.py"), "--model", str(tiny_model("qwen3"))]
    cmd += ["--num-requests", "3", "--prompt-len", "8", "--output-len", "3", "--sweep-num-rates", "1"]
    cmd += ["--with-and-without-logprobs", "--output", str(out), "--", "--device", "cpu", "--max-model-len", "128"]
    run = subprocess.run(cmd, cwd=REPO / "benchmarks", capture_output=True, text=True, timeout=900)
    assert run.returncode == 0, run.stdout[-2000:] + run.stderr[-3000:]
    result = json.loads(out.read_text())
    assert result["workload"] == {"num_requests": 3, "prompt_len": 8, "output_len": 3}
    assert result["server_ready_s"] > 0 and result["engine_flags"][:2] == ["--device", "cpu"]
    assert [r["logprobs"] for r in result["runs"]] == [None, 5]
    for setting in result["runs"]:
        [inf] = setting["rate_inf"]
        assert inf["num_ok"] == 3 and inf["num_failed"] == 0 and inf["output_tokens"] == 9
        assert inf["output_throughput"] > 0 and "inf" in inf["load"]
        for name in ("ttft_ms", "tpot_ms", "itl_ms"):
            assert set(inf[name]) == {"mean", "p50", "p90", "p99"}
        assert len(setting["sweep"]) >= 2 and all(r["num_ok"] == 3 for r in setting["sweep"])
    assert result["logprobs_throughput_ratio"] > 0


def test_bench_asks_for_logprobs_in_each_endpoints_spelling():
    from model_optimizer.optimizer.bench.client import ClientConfig
    from model_optimizer.optimizer.bench.request_options import request_body
    from model_optimizer.optimizer.bench.workloads import BenchRequest

    req = BenchRequest(prompt="hi", prompt_len=1, output_len=2)
    assert "logprobs" not in json.loads(request_body(ClientConfig(model="m"), req))
    completions = json.loads(request_body(ClientConfig(model="m", logprobs=5), req))
    assert completions["logprobs"] == 5 and "top_logprobs" not in completions
    chat = json.loads(request_body(ClientConfig(model="m", endpoint="chat", logprobs=5), req))
    assert chat["logprobs"] is True and chat["top_logprobs"] == 5


def test_bench_sends_a_schema_or_a_response_format_from_a_file(tmp_path):
    from model_optimizer.optimizer.bench.client import ClientConfig
    from model_optimizer.optimizer.bench.request_options import request_body
    from model_optimizer.optimizer.bench.workloads import BenchRequest

    req = BenchRequest(prompt="hi", prompt_len=1, output_len=2)
    schema = tmp_path / "order.json"
    schema.write_text('{"type": "object", "properties": {"id": {"type": "integer"}}}')
    body = json.loads(request_body(ClientConfig(model="m", endpoint="chat", json_schema=str(schema)), req))
    assert body["response_format"] == {
        "type": "json_schema",
        "json_schema": {"name": "order", "schema": {"type": "object", "properties": {"id": {"type": "integer"}}}},
    }
    fmt = tmp_path / "fmt.json"
    fmt.write_text('{"type": "json_object"}')
    assert json.loads(request_body(ClientConfig(model="m", response_format=str(fmt)), req))["response_format"] == {
        "type": "json_object"
    }
    with pytest.raises(ValueError, match="cannot read"):
        ClientConfig(json_schema=str(tmp_path / "nope.json"))
    (tmp_path / "list.json").write_text("[1]")
    with pytest.raises(ValueError, match="must be an object"):
        ClientConfig(json_schema=str(tmp_path / "list.json"))
    with pytest.raises(ValueError, match="not both"):
        ClientConfig(json_schema=str(schema), response_format=str(fmt))
