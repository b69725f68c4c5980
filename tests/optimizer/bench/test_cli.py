"""`mopt bench` end to end: flags in, files out, against the real streaming server."""

import dataclasses
import json

import pytest

from model_optimizer.cli.main import main
from model_optimizer.optimizer.bench import sweep
from model_optimizer.optimizer.bench.compare import compare_rows, pair_runs
from model_optimizer.optimizer.bench.load import LoadConfig
from model_optimizer.optimizer.bench.report import load_run
from tests.optimizer.bench.conftest import TTFT
from tests.optimizer.bench.stream_server import ServerThread, create_app


def bench(server, tmp_path, *flags):
    prompt_len = [] if "--dataset" in flags else ["--prompt-len", "8"]  # a file's prompts have their own lengths
    base = ["bench", "--base-url", server.base_url, "--output-dir", str(tmp_path), "--no-progress"]
    return main([*base, *prompt_len, "--output-len", "4", *flags])


@pytest.mark.slow
def test_run_writes_json_csv_html(server, tmp_path, capsys):
    # the SLO is loose on purpose: a busy machine delays answers, and a missed SLO is test_report's to check
    rc = bench(server, tmp_path, "--num-requests", "8", "--concurrency", "4", "--slo", "ttft_p99=60s,tpot_p99=60s")
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
    out = " ".join(capsys.readouterr().out.split())
    assert "TTFT" in out and "ignore_eos: on (the default: every answer runs to its output length" in out


@pytest.mark.slow
def test_sweep_runs_baseline_saturation_and_rates_between(tmp_path, capsys):
    # slow answers, so that serving 5 at once is clearly faster than one at a time even on a busy machine
    with ServerThread(create_app(ttft=0.25, itl=0.01)) as slow:
        rc = bench(
            slow,
            tmp_path,
            "--load-mode",
            "sweep",
            "--num-requests",
            "5",
            "--sweep-num-rates",
            "2",
            "--sweep-max-concurrency",
            "5",
            "--sweep-arrival",
            "constant",
        )
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
    out = " ".join(capsys.readouterr().out.split())
    # 5 requests per rate: said before the first run, and before each table that shows a p99
    assert out.index("warning: each run of the sweep measures 5 requests") < out.index("sweep: one at a time")
    assert out.count("warning: 5 requests: the p99 below is the slowest of them") == 4


def test_failing_server_is_reported_not_hidden(server, tmp_path, capsys):
    rc = bench(server, tmp_path, "--model", "fail-500", "--num-requests", "5")
    assert rc == 1
    result = load_run(str(next(tmp_path.glob("run-*.json"))))
    assert result["summary"]["errors"] == {"http_500": 5} and result["summary"]["num_requests"] == 5
    assert result["summary"]["error_examples"] == {"http_500": "internal error"}  # the body's error.message
    out = capsys.readouterr().out
    assert "http_500 x5" in out and "first http_500: internal error" in out


@pytest.mark.slow
def test_trace_mode_from_file(server, tmp_path):
    trace = tmp_path / "trace.jsonl"
    trace.write_text(
        "".join(json.dumps({"timestamp": t, "prompt_len": 4, "output_len": 2}) + "\n" for t in (0, 0.1, 0.2))
    )
    rc = bench(server, tmp_path, "--dataset", "trace", "--dataset-path", str(trace), "--load-mode", "trace")
    assert rc == 0
    result = load_run(str(next(tmp_path.glob("run-*.json"))))
    # the schedule is the trace's, and no request leaves before its time (how late depends on the machine)
    assert [r["scheduled"] for r in result["requests"]] == pytest.approx([0, 0.1, 0.2], abs=1e-6)
    assert all(r["send"] >= r["scheduled"] - 0.002 for r in result["requests"]), result["requests"]
    assert result["summary"]["output_tokens"] == 4 * 3  # --output-len 4 overrides the trace


@pytest.mark.slow
def test_compare_prints_ratios(server, tmp_path, capsys):
    a, b = tmp_path / "a", tmp_path / "b"
    assert bench(server, a, "--num-requests", "4", "--concurrency", "1") == 0
    assert bench(server, b, "--num-requests", "8", "--concurrency", "4") == 0
    path_a, path_b = next(a.glob("run-*.json")), next(b.glob("run-*.json"))
    capsys.readouterr()
    assert main(["bench", "compare", str(path_a), str(path_b)]) == 0
    out = capsys.readouterr().out
    assert "request_rate" in out and "B/A" in out
    rows = {
        key: (ratio, verdict)
        for key, _, _, ratio, verdict in compare_rows(load_run(str(path_a)), load_run(str(path_b)))
    }
    assert rows["num_requests"][0] == pytest.approx(2.0)
    assert rows["request_rate"][1] == "better"  # four at a time beats one at a time on this server


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (["--load-mode", "poisson"], "needs --request-rate"),
        (["--prompt-len", "many"], "prompt_len must be N"),
        (["--slo", "ttft=fast"], "slo term"),
        (["--dataset", "trace"], "needs --dataset-path"),
        (["--dataset-path", "/tmp/trace.jsonl"], "--dataset-path needs --dataset trace or --dataset sharegpt"),
        (["--load-mode", "trace"], "give --dataset trace"),
        (["--dataset", "sharegpt", "--dataset-path", "/nonexistent.json"], "dataset file not found"),
        # flags the chosen load mode would ignore are refused, not ignored
        (["--load-mode", "closed", "--request-rate", "5"], "load mode closed does not use it"),
        (["--load-mode", "sweep", "--request-rate", "5"], "load mode sweep does not use it"),
        (["--request-rate", "5", "--concurrency", "4"], "load mode poisson does not use it"),
        (["--concurrency", "2", "--max-concurrency", "4"], "give one of them"),
        (["7"], "unexpected argument '7'"),
        # and so are shapes of arrivals, sweeps and synthetic prompts that the run would not have
        (
            ["--load-mode", "constant", "--request-rate", "5", "--burstiness", "0.5"],
            "load mode constant does not use it",
        ),
        (["--concurrency", "2", "--burstiness", "0.5"], "poisson arrivals; load mode closed does not use it"),
        (["--load-mode", "sweep", "--sweep-arrival", "constant", "--burstiness", "2"], "--sweep-arrival constant"),
        (["--request-rate", "5", "--trace-speedup", "2"], "load mode trace; load mode poisson does not use it"),
        (["--concurrency", "2", "--sweep-num-rates", "3"], "load mode closed does not use --sweep-num-rates"),
        (["--sweep-max-concurrency", "8", "--sweep-arrival", "constant"], "--sweep-max-concurrency, --sweep-arrival"),
        (["--dataset", "trace", "--dataset-path", "t.jsonl", "--prompt-len", "64"], "does not use --prompt-len"),
        (
            ["--dataset", "sharegpt", "--dataset-path", "s.json", "--random-input-len", "64"],
            "does not use --prompt-len",
        ),
        (
            ["--dataset", "trace", "--dataset-path", "t.jsonl", "--num-prefix-groups", "2", "--prefix-len", "16"],
            "--dataset trace sends the file's prompts and does not use --num-prefix-groups, --prefix-len",
        ),
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


@pytest.mark.slow
def test_runs_in_one_folder_are_numbered_on_never_overwritten(server, tmp_path):
    assert bench(server, tmp_path, "--num-requests", "2", "--concurrency", "2") == 0
    first = (tmp_path / "run-01-concurrency-2.json").read_text()
    assert bench(server, tmp_path, "--num-requests", "3", "--concurrency", "2") == 0
    assert bench(server, tmp_path, "--num-requests", "1") == 0
    names = sorted(p.name for p in tmp_path.glob("run-*.json"))
    assert names == ["run-01-concurrency-2.json", "run-02-concurrency-2.json", "run-03-concurrency-1.json"]
    assert (tmp_path / "run-01-concurrency-2.json").read_text() == first  # untouched
    assert [load_run(str(tmp_path / n))["summary"]["num_requests"] for n in names] == [2, 3, 1]
    # the folder's summary and report cover every run in it, not only the last invocation's
    assert len((tmp_path / "summary.csv").read_text().splitlines()) == 1 + 3
    assert len(list(tmp_path.glob("run-*.requests.csv"))) == 3


@pytest.mark.slow
def test_vllm_flag_names_are_accepted(server, tmp_path):
    out = tmp_path / "vllm"
    rc = main(
        [
            "bench",
            "--base-url",
            server.base_url,
            "--no-progress",
            "--dataset-name",
            "random",
            "--num-prompts",
            "4",
            "--random-input-len",
            "6",
            "--random-output-len",
            "3",
            "--max-concurrency",
            "2",
            "--save-result",
            "--result-dir",
            str(out),
            "--endpoint",
            "/v1/completions",
        ]
    )
    assert rc == 0
    result = load_run(str(next(out.glob("run-*.json"))))
    # --max-concurrency alone means requests in flight, as in vLLM (its rate defaults to inf)
    assert result["plan"]["mode"] == "closed" and result["plan"]["concurrency"] == 2
    assert (
        result["config"]["workload"]["dataset"] == "synthetic"
        and result["config"]["client"]["endpoint"] == "completions"
    )
    assert [(r["prompt_len"], r["output_tokens"]) for r in result["requests"]] == [(6, 3)] * 4
    # --request-rate without --load-mode is an open loop at that rate (vLLM's meaning), capped by --max-concurrency
    rc = main(
        [
            "bench",
            "--base-url",
            server.base_url,
            "--no-progress",
            "--num-prompts",
            "3",
            "--random-input-len",
            "6",
            "--random-output-len",
            "2",
            "--request-rate",
            "50",
            "--max-concurrency",
            "2",
            "--result-dir",
            str(out),
        ]
    )
    assert rc == 0
    plan = load_run(str(out / "run-02-poisson-50-req-s-max-2-in-flight.json"))["plan"]
    assert (plan["mode"], plan["rate"], plan["max_concurrency"]) == ("poisson", 50, 2)


def test_an_unknown_flag_is_named(capsys):
    with pytest.raises(SystemExit) as exc:
        main(["bench", "--num-promts", "10"])
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert "unrecognized arguments: --num-promts" in err and "invalid choice" not in err
    with pytest.raises(SystemExit):
        main(["bench", "--dataset-name", "sonnet"])  # a vLLM dataset we do not have
    assert "invalid choice: 'sonnet' (choose from 'synthetic', 'trace', 'sharegpt')" in capsys.readouterr().err


@pytest.mark.slow
def test_compare_folders_pairs_runs_and_warns_about_different_workloads(server, tmp_path, capsys):
    a, b, c = tmp_path / "a", tmp_path / "b", tmp_path / "c"
    assert bench(server, a, "--num-requests", "4", "--concurrency", "2") == 0
    assert bench(server, a, "--num-requests", "4", "--concurrency", "1") == 0
    assert bench(server, b, "--num-requests", "4", "--concurrency", "1") == 0
    assert bench(server, b, "--num-requests", "4", "--concurrency", "2") == 0
    assert bench(server, c, "--num-requests", "4", "--concurrency", "2", "--prompt-len", "16") == 0
    capsys.readouterr()
    assert main(["bench", "compare", str(a), str(b)]) == 0  # folders: a traceback before
    out = capsys.readouterr().out
    assert out.count("B/A") == 2  # one table per load both folders measured
    assert "run-01-concurrency-2.json" in out and "run-02-concurrency-2.json" in out
    assert "different requests" not in out
    assert main(["bench", "compare", str(next(a.glob("run-01-*.json"))), str(c)]) == 0  # a one-run folder is that run
    out = " ".join(capsys.readouterr().out.split())
    assert "warning: the runs sent different requests: prompt_len: A '8', B '16'" in out
    assert "mean prompt tokens per request: A 8.00, B 16.0" in out


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["compare", "A"], "compare takes two runs"),
        (["compare", "A", "B", "--concurrency", "3"], "takes no run flags; drop --concurrency"),
        (["compare", "{empty}", "{empty}"], "holds no run-NN-*.json file"),
        (["compare", "{missing}", "{missing}"], "no such file"),
    ],
)
def test_compare_bad_input_gives_a_clear_error(tmp_path, capsys, args, message):
    (tmp_path / "empty").mkdir()
    args = [a.format(empty=tmp_path / "empty", missing=tmp_path / "missing.json") for a in args]
    assert main(["bench", *args]) == 2
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err


def test_closed_loop_concurrency_never_exceeds_the_requests_sent(server, tmp_path, capsys):
    """--concurrency 1000000 for 2 requests opened a slot (and a connection pool share) per unit of
    concurrency: 45 s and 3 GB before the first request. The run has 2 slots and says so."""
    assert bench(server, tmp_path, "--num-requests", "2", "--concurrency", "1000000") == 0
    (run,) = tmp_path.glob("run-*.json")
    result = load_run(str(run))
    assert result["plan"]["concurrency"] == 2 and result["label"].endswith("concurrency 2")
    assert result["summary"]["num_ok"] == 2
    assert "--concurrency 1000000 lowered to 2: only 2 requests are sent" in capsys.readouterr().out


def test_responses_endpoint_reads_openais_event_stream(server, tmp_path):
    """--endpoint responses: text deltas are the tokens, the closing event's usage counts them; the stream
    needs no [DONE] (OpenAI sends none), and one that ends without its closing event is an error."""
    assert bench(server, tmp_path / "ok", "--endpoint", "responses", "--num-requests", "4", "--concurrency", "2") == 0
    [run] = sorted((tmp_path / "ok").glob("run-*.json"))
    result = load_run(str(run))
    assert result["summary"]["num_ok"] == 4 and result["summary"]["output_tokens"] == 16
    assert all(len(r["chunk_times"]) == 4 for r in result["requests"])
    assert result["summary"]["ttft_ms"]["p50"] >= TTFT * 1e3 - 5
    assert isinstance(server.app.state.prompts[-1], str)  # text input, not token ids
    for model, error in (
        ("no-done", "malformed_stream"),
        ("error-event", "stream_error"),
        ("failed-null", "stream_error"),
    ):
        bench(server, tmp_path / model, "--endpoint", "/v1/responses", "--model", model, "--num-requests", "2")
        [run] = sorted((tmp_path / model).glob("run-*.json"))
        records = load_run(str(run))["requests"]
        assert {r["error"] for r in records} == {error}, model
        if model == "error-event":
            assert "the model fell over" in records[0]["error_detail"]


def trace_file(tmp_path, stamps, prompts=None):
    """A JSONL trace with text prompts (distinct: "request k ...") sent at `stamps`, 2 tokens each."""
    path = tmp_path / "trace.jsonl"
    prompts = prompts or [f"request {k} " + "word " * 6 for k in range(len(stamps))]
    path.write_text(
        "".join(json.dumps({"timestamp": t, "prompt": p, "output_len": 2}) + "\n" for t, p in zip(stamps, prompts))
    )
    return path, prompts


def test_an_unsorted_trace_is_replayed_in_time_order(server, tmp_path):
    """Timestamps out of file order: each request is sent at its time, and --duration stops at the first
    one due after it (not at the first line past it, which ended this run after one request)."""
    trace, prompts = trace_file(tmp_path, [0.0, 10.0, 0.1, 0.2])
    server.app.state.prompts.clear()
    flags = ("--dataset", "trace", "--dataset-path", str(trace), "--load-mode", "trace", "--duration", "1")
    assert bench(server, tmp_path / "out", *flags) == 0
    result = load_run(str(next((tmp_path / "out").glob("run-*.json"))))
    assert [r["scheduled"] for r in result["requests"]] == pytest.approx([0.0, 0.1, 0.2], abs=1e-6)
    assert sorted(server.app.state.prompts) == sorted([prompts[0], prompts[2], prompts[3]])


def test_warmup_never_sends_the_measured_prompts(server, tmp_path):
    """A trace holds the same prompts whatever the seed: warm-up requests are random prompts of the same
    lengths, so the measured prompts are not in the server's prefix cache when the run starts."""
    trace, prompts = trace_file(tmp_path, [0.0, 0.05, 0.1])
    server.app.state.prompts.clear()
    flags = ("--dataset", "trace", "--dataset-path", str(trace), "--load-mode", "trace", "--num-warmups", "2")
    assert bench(server, tmp_path / "out", *flags) == 0
    received = server.app.state.prompts
    warmups, measured = received[:2], received[2:]
    assert sorted(measured) == sorted(prompts) and not set(warmups) & set(prompts)
    result = load_run(str(next((tmp_path / "out").glob("run-*.json"))))
    assert result["warmup"]["num_ok"] == 2


def test_a_run_that_repeats_prompts_says_so(server, tmp_path, capsys):
    """A run that sends more requests than it has distinct prompts (a duration run past --pool-size, a file
    shorter than --num-requests) repeats them: one warning line, and the count in the run file."""
    trace, _ = trace_file(tmp_path, [0.0, 0.1])
    flags = ("--dataset", "trace", "--dataset-path", str(trace), "--num-requests", "5", "--concurrency", "2")
    assert bench(server, tmp_path / "out", *flags) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert out.count("repeated a prompt") == 1 and "3 of 5 requests repeated a prompt" in out
    assert load_run(str(next((tmp_path / "out").glob("run-*.json"))))["repeated_prompts"] == 3
    assert bench(server, tmp_path / "fresh", "--num-requests", "3") == 0
    assert "repeated a prompt" not in capsys.readouterr().out
    assert load_run(str(next((tmp_path / "fresh").glob("run-*.json"))))["repeated_prompts"] == 0


def test_compare_pairs_two_sweeps_step_by_step():
    """Two sweeps measure different rates, which their rate steps' labels hold: they pair by step. Run files
    written before steps were recorded pair by label, as they did."""
    load = LoadConfig(load_mode="sweep", num_requests=4)

    def sweep_runs(rates):
        plans = [sweep.baseline_plan(load), sweep.saturation_plan(load), *sweep.rate_plans(load, rates)]
        return [{"plan": dataclasses.asdict(p), "label": p.label} for p in plans]

    a, b = sweep_runs([10.0, 20.0]), sweep_runs([11.0, 23.0])
    assert [(x["plan"]["step"], y["plan"]["step"]) for x, y in pair_runs(a, b)] == [(0, 0), (1, 1), (2, 2), (3, 3)]
    assert [y["plan"]["rate"] for _, y in pair_runs(a, b)] == [None, None, 11.0, 23.0]
    old_a, old_b = ([{"plan": {k: v for k, v in r["plan"].items() if k != "step"}} for r in runs] for runs in (a, b))
    assert [x["plan"]["label"] for x, _ in pair_runs(old_a, old_b)] == [
        "sweep: one at a time",
        "sweep: saturation (concurrency 4)",
    ]
    # a sweep saved before steps were recorded against a new one: by label, as both sides can
    assert [x["plan"]["label"] for x, _ in pair_runs(old_a, b)] == [
        "sweep: one at a time",
        "sweep: saturation (concurrency 4)",
    ]
