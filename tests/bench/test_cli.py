"""`mopt bench` end to end: flags in, files out, against the real streaming server."""

import json

import pytest

from model_optimizer.bench.compare import compare_rows
from model_optimizer.bench.report import load_run
from model_optimizer.cli.main import main
from tests.bench.conftest import TTFT
from tests.bench.stream_server import ServerThread, create_app


def bench(server, tmp_path, *flags):
    return main(["bench", "--base-url", server.base_url, "--output-dir", str(tmp_path), "--no-progress",
                 "--prompt-len", "8", "--output-len", "4", *flags])


def test_run_writes_json_csv_html(server, tmp_path, capsys):
    rc = bench(server, tmp_path, "--num-requests", "8", "--concurrency", "4", "--slo", "ttft_p99=500ms,tpot_p99=200ms")
    assert rc == 0
    runs = sorted(tmp_path.glob("run-*.json"))
    assert [p.name for p in runs] == ["run-01-concurrency-4.json"]
    result = load_run(str(runs[0]))
    s = result["summary"]
    assert s["num_ok"] == 8 and s["output_tokens"] == 32
    assert s["ttft_ms"]["p50"] >= TTFT * 1e3 - 5
    assert s["goodput"] > 0 and s["slo_met"] is True
    assert result["config"]["client"]["model"] == "tiny"  # found through GET /v1/models
    assert len(result["requests"]) == 8 and len(result["requests"][0]["chunk_times"]) == 4
    server_metrics = result["server_metrics"]
    assert server_metrics["available"] and server_metrics["prefix_cache_hit_rate"] == pytest.approx(0.25)
    assert server_metrics["counters"]["prefix_cache_queries_total"]["delta"] == 800
    assert result["gpu"]["available"] is False and result["gpu"]["reason"]
    assert set(result["client_overhead"]) >= {"loop_lag_ms", "send_lag_ms", "cpu_per_wall_s", "warnings"}
    csv_lines = (tmp_path / "summary.csv").read_text().splitlines()
    assert csv_lines[0].startswith("label,") and len(csv_lines) == 2
    assert len((tmp_path / "run-01-concurrency-4.requests.csv").read_text().splitlines()) == 9
    page = (tmp_path / "report.html").read_text()
    assert page.count("data:image/png;base64,") == 2
    assert (tmp_path / "latency_cdf.png").read_bytes()[:4] == b"\x89PNG"
    assert not list(tmp_path.glob(".*tmp"))  # atomic writes leave no temp files
    assert "TTFT" in capsys.readouterr().out


def test_sweep_runs_baseline_saturation_and_rates_between(tmp_path):
    # slow answers, so that serving 5 at once is clearly faster than one at a time even on a busy machine
    with ServerThread(create_app(ttft=0.25, itl=0.01)) as slow:
        rc = bench(slow, tmp_path, "--load-mode", "sweep", "--num-requests", "5", "--sweep-num-rates", "2",
                   "--sweep-max-concurrency", "5", "--sweep-arrival", "constant")
    assert rc == 0
    runs = [load_run(str(p)) for p in sorted(tmp_path.glob("run-*.json"))]
    assert [r["plan"]["mode"] for r in runs] == ["closed", "closed", "constant", "constant"]
    assert [r["plan"]["concurrency"] for r in runs[:2]] == [1, 5]
    low, high = (r["summary"]["request_rate"] for r in runs[:2])
    assert high > low  # about 5x on a quiet machine; far less when the machine is overloaded
    rates = [r["plan"]["rate"] for r in runs[2:]]
    assert rates == pytest.approx([low + (high - low) / 3, low + 2 * (high - low) / 3])
    assert (tmp_path / "throughput_vs_latency.png").exists()
    assert (tmp_path / "report.html").read_text().count("data:image/png;base64,") == 3
    assert len((tmp_path / "summary.csv").read_text().splitlines()) == 1 + 4


def test_failing_server_is_reported_not_hidden(server, tmp_path, capsys):
    rc = bench(server, tmp_path, "--model", "fail-500", "--num-requests", "5")
    assert rc == 1
    result = load_run(str(next(tmp_path.glob("run-*.json"))))
    assert result["summary"]["errors"] == {"http_500": 5} and result["summary"]["num_requests"] == 5
    assert "http_500 x5" in capsys.readouterr().out


def test_trace_mode_from_file(server, tmp_path):
    trace = tmp_path / "trace.jsonl"
    trace.write_text("".join(json.dumps({"timestamp": t, "prompt_len": 4, "output_len": 2}) + "\n" for t in (0, 0.1, 0.2)))
    rc = bench(server, tmp_path, "--dataset", "trace", "--dataset-path", str(trace), "--load-mode", "trace")
    assert rc == 0
    result = load_run(str(next(tmp_path.glob("run-*.json"))))
    lags = [r["send"] - due for r, due in zip(result["requests"], (0, 0.1, 0.2))]
    assert all(-0.002 <= lag <= 0.06 for lag in lags), lags
    assert result["summary"]["output_tokens"] == 4 * 3  # --output-len 4 overrides the trace


def test_compare_prints_ratios(server, tmp_path, capsys):
    a, b = tmp_path / "a", tmp_path / "b"
    assert bench(server, a, "--num-requests", "4", "--concurrency", "1") == 0
    assert bench(server, b, "--num-requests", "8", "--concurrency", "4") == 0
    path_a, path_b = next(a.glob("run-*.json")), next(b.glob("run-*.json"))
    capsys.readouterr()
    assert main(["bench", "compare", str(path_a), str(path_b)]) == 0
    out = capsys.readouterr().out
    assert "request_rate" in out and "B/A" in out
    rows = {key: (ratio, verdict) for key, _, _, ratio, verdict in compare_rows(load_run(str(path_a)), load_run(str(path_b)))}
    assert rows["num_requests"][0] == pytest.approx(2.0)
    assert rows["request_rate"][1] == "better"  # four at a time beats one at a time on this server


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (["--load-mode", "poisson"], "needs --request-rate"),
        (["--prompt-len", "many"], "prompt_len must be N"),
        (["--slo", "ttft=fast"], "slo term"),
        (["--dataset", "trace"], "needs --dataset-path"),
        (["--load-mode", "trace"], "give --dataset trace"),
        (["--dataset", "sharegpt", "--dataset-path", "/nonexistent.json"], "dataset file not found"),
    ],
)
def test_bad_input_gives_a_clear_error(server, tmp_path, capsys, flags, message):
    assert bench(server, tmp_path, *flags) == 2
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err


def test_compare_rejects_other_files(tmp_path, capsys):
    other = tmp_path / "x.json"
    other.write_text("{}")
    assert main(["bench", "compare", str(other), str(other)]) == 2
    assert "not a run file written by mopt bench" in capsys.readouterr().err
