"""report.html and its plots: sections a reader needs, numbers written for people, no empty panels."""

from __future__ import annotations

import copy
import io
import re
from html.parser import HTMLParser

import pytest
from rich.console import Console

from model_optimizer.cli.main import main
from model_optimizer.optimizer.bench import fmt
from model_optimizer.optimizer.bench.client import RequestRecord
from model_optimizer.optimizer.bench.html import render_page
from model_optimizer.optimizer.bench.overhead import overhead_report
from model_optimizer.optimizer.bench.plots import cdf_figure, sweep_figure, ttft_over_time_figure
from model_optimizer.optimizer.bench.report import load_runs, print_summary


class _Page(HTMLParser):
    """Section ids, table headers and the visible text (no attributes, so no embedded PNG data)."""

    def __init__(self, page: str) -> None:
        super().__init__()
        self.sections: list[str] = []
        self.figures: list[str] = []
        self.headers: list[str] = []
        self.parts: list[str] = []
        self._in_th = False
        self.feed(page)
        self.text = " ".join(" ".join(self.parts).split())

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        if tag == "section":
            self.sections.append(attrs["id"])
        if tag == "figure":
            self.figures.append(attrs["id"])
        self._in_th = tag == "th"

    def handle_endtag(self, tag):
        self._in_th = False if tag == "th" else self._in_th

    def handle_data(self, data):
        self.parts.append(data)
        if self._in_th:
            self.headers.append(data.strip())


def bench(server, out, *flags):
    return main(
        [
            "bench",
            "--base-url",
            server.base_url,
            "--output-dir",
            str(out),
            "--no-progress",
            "--prompt-len",
            "8",
            "--output-len",
            "4",
            *flags,
        ]
    )


def test_number_formatting_follows_magnitude():
    assert fmt.number(11920.3) == "11,920" and fmt.with_unit(12345.6, "tok/s") == "12,346 tok/s"
    assert fmt.ms(85.23) == "85.2 ms" and fmt.number(3.14159) == "3.14" and fmt.number(0.01234) == "0.0123"
    assert fmt.number(1234567) == "1,234,567" and fmt.number(0.0) == "0"
    assert fmt.percent(0.25) == "25.0 %" and fmt.percent(1.0) == "100 %"
    assert fmt.number(None) == fmt.ms(None) == fmt.percent(None) == "-"
    assert fmt.number(float("nan")) == "-" and fmt.number(float("inf")) == "inf"


@pytest.mark.slow
def test_report_has_settings_summary_slo_and_server_tables(server, tmp_path):
    assert (
        bench(server, tmp_path, "--num-requests", "8", "--concurrency", "4", "--slo", "ttft_p99=1ms,e2e_p99=60s") == 0
    )
    page = _Page((tmp_path / "report.html").read_text())
    # no errors and no GPU here: those sections are left out
    assert page.sections == ["settings", "summary", "slo", "latency", "server", "client", "plots"]
    assert page.figures == ["plot-latency_cdf", "plot-ttft_over_time"]
    text = page.text
    for setting in (
        "closed loop, 4 in flight",
        "8 requests",
        "ttft_p99=1ms,e2e_p99=60s",
        "token ids from [100, 1000)",
        "ignore_eos on (the default: every answer runs to its output length; --no-ignore-eos lets the model stop)",
    ):
        assert setting in text
    # per-SLO verdicts: TTFT (80 ms here) misses 1 ms, E2E meets 60 s
    assert "TTFT p99 ≤ 1 ms" in page.headers and "E2E p99 ≤ 60,000 ms" in page.headers
    assert re.search(r"#01 concurrency 4 [\d.,]+ ms FAIL [\d.,]+ ms PASS FAIL 0 req/s 0 %", text), text
    # server metrics as a table, not a dict
    assert {"preemptions", "prefix-cache hit rate", "KV cache peak"} <= set(page.headers)
    assert "25.0 %" in text
    assert "{'" not in text and "':" not in text
    assert not re.search(r"\d[eE][+-]\d", text)


@pytest.mark.slow
def test_large_figures_are_written_with_separators(server, tmp_path):
    assert bench(server, tmp_path, "--num-requests", "2") == 0
    [run] = load_runs(tmp_path)
    big = copy.deepcopy(run)
    big["summary"]["output_throughput"] = 11920.3  # what the old report printed as 1.192e+04
    big["summary"]["ttft_ms"]["p50"] = 1234.5
    text = _Page(render_page([big], {})).text
    assert "11,920" in text and "1,234 /" in text
    assert "e+0" not in text


@pytest.mark.slow
def test_sweep_points_are_labelled_with_their_load(server, tmp_path):
    assert bench(server, tmp_path, "--num-requests", "4", "--concurrency", "2") == 0
    assert bench(server, tmp_path, "--num-requests", "4", "--request-rate", "40") == 0
    runs = load_runs(tmp_path)
    fig = sweep_figure(runs)
    for ax in fig.axes:
        assert sorted(t.get_text() for t in ax.texts) == ["40.0 req/s", "c=2"]
    assert [ax.get_title() for ax in fig.axes] == ["TTFT vs throughput", "TPOT vs throughput", "E2E vs throughput"]
    page = _Page((tmp_path / "report.html").read_text())
    assert "plot-throughput_vs_latency" in page.figures  # the folder's two runs are one report
    assert "#01 concurrency 2" in page.text and "#02 poisson 40 req/s" in page.text


def test_embedding_runs_draw_no_empty_panels(server, tmp_path):
    assert bench(server, tmp_path, "--endpoint", "embeddings", "--num-requests", "4") == 0
    runs = load_runs(tmp_path)
    assert [ax.get_title() for ax in cdf_figure(runs).axes] == ["E2E CDF"]  # no TTFT, TPOT or ITL panels
    assert ttft_over_time_figure(runs) is None
    page = _Page((tmp_path / "report.html").read_text())
    assert page.figures == ["plot-latency_cdf"] and not (tmp_path / "ttft_over_time.png").exists()
    assert not any(h.startswith(("TTFT", "TPOT", "ITL", "output")) for h in page.headers)
    assert "E2E p50 / p99 (ms)" in page.headers and "output length" not in page.text


@pytest.mark.slow
def test_failed_runs_show_their_errors(server, tmp_path):
    assert bench(server, tmp_path / "failed", "--model", "fail-500", "--num-requests", "3") == 1
    page = _Page((tmp_path / "failed" / "report.html").read_text())
    assert "errors" in page.sections and "first message" in page.headers
    assert "http_500 3 internal error" in page.text
    assert page.figures == [] and "No successful request: nothing to plot." in page.text
    # beside a run with figures, the failed run's missing ones are dashes (a TypeError before)
    assert bench(server, tmp_path / "failed", "--num-requests", "2") == 0
    text = _Page((tmp_path / "failed" / "report.html").read_text()).text
    assert re.search(r"#01 concurrency 1 0 / 3 [\d.]+ s 0( -){6} #02 concurrency 1 2 / 2 ", text), text


def test_a_client_bound_run_is_flagged_in_the_page_and_the_terminal(server, tmp_path):
    assert bench(server, tmp_path, "--num-requests", "2") == 0
    [run] = load_runs(tmp_path)
    page = _Page((tmp_path / "report.html").read_text())
    assert "workers" in page.headers and "bottleneck" not in page.text
    busy = copy.deepcopy(run)
    lag = {"p50": 90.0, "p99": 162.0}
    loops = [{"loop_lag_ms": lag, "cpu_per_wall_s": c, "wall_s": 10.0, "num_requests": 1} for c in (0.88, 0.7)]
    busy["client_overhead"] = overhead_report([RequestRecord(0, 1, 1)], loops, num_cpus=16)
    busy["num_workers"] = 2
    text = _Page(render_page([busy], {})).text
    assert "The client may have been the bottleneck in #01 concurrency 1" in text
    assert "--num-workers 4" in text and "0.88 CPU, lag p99 162 ms, 1 req" in text
    out = io.StringIO()
    print_summary(Console(file=out, width=200), busy)
    printed = out.getvalue()
    assert "in 2 workers (busiest 0.88)" in printed and "worker 2: 1 requests, 0.70 CPU" in printed
    assert "warning: the client may be the bottleneck (event-loop lag p99 162 ms)" in printed


def test_temperature_zero_is_shown_as_zero(server, tmp_path):
    """--temperature 0 (greedy) is a setting of its own, not the server's default."""
    from model_optimizer.optimizer.bench.settings import run_settings

    assert bench(server, tmp_path, "--num-requests", "1", "--temperature", "0") == 0
    [run] = load_runs(tmp_path)
    assert run_settings(run)["temperature"] == "0"
    assert "temperature 0 " in _Page((tmp_path / "report.html").read_text()).text
    assert bench(server, tmp_path / "default", "--num-requests", "1") == 0
    assert run_settings(load_runs(tmp_path / "default")[0])["temperature"] == "server default"


def test_an_slo_missed_through_failures_reads_inf_and_the_run_file_is_json(server, tmp_path):
    assert bench(server, tmp_path, "--model", "fail-500", "--num-requests", "2", "--slo", "ttft_p99=1s") == 1
    [path] = tmp_path.glob("run-*.json")
    assert "Infinity" not in path.read_text()  # json.dumps writes inf as Infinity, which is not JSON
    check = load_runs(tmp_path)[0]["summary"]["slo_checks"]["ttft_p99"]
    assert check == {"limit_ms": 1000.0, "measured_ms": None, "share_over_limit": 1.0, "met": False}
    assert re.search(r"#01 concurrency 1 inf FAIL", _Page((tmp_path / "report.html").read_text()).text)
