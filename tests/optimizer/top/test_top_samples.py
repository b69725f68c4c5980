"""How `mopt top` reads the samples of a /metrics page over real HTTP: gauges that are fractions are
averaged over label sets (data-parallel engines) while counts and counters are summed, NaN is no value,
and a malformed sample is skipped and counted instead of ending the watch."""

from __future__ import annotations

import pytest

from model_optimizer.optimizer.top.metrics import Scrape
from model_optimizer.optimizer.top.render import plain_line, render
from model_optimizer.optimizer.top.view import Monitor, build_view
from tests.optimizer.top.site import Answer, Site, once_json
from tests.optimizer.top.test_top import _text

M = 'model_name="m"'


def _dp(finished: tuple[int, int]) -> str:
    """vLLM's /metrics with two data-parallel engines; `finished`: each engine's request_success_total."""
    lines = []
    for engine, (running, kv, done) in enumerate(zip((3, 4), (0.7, 0.6), finished, strict=True)):
        labels = f'{M},engine="{engine}"'
        lines += [
            f"vllm:num_requests_running{{{labels}}} {running}",
            f"vllm:num_requests_waiting{{{labels}}} 1",
            f"vllm:kv_cache_usage_perc{{{labels}}} {kv}",
            f'vllm:request_success_total{{{labels},finished_reason="stop"}} {done}',
            f"vllm:num_preemptions_total{{{labels}}} 2",
        ]
    return "\n".join(lines) + "\n"


def test_kv_cache_usage_is_the_mean_of_the_engines_and_counts_are_summed(capsys):
    """Two engines at 0.7 and 0.6 showed "KV cache 130.0%"."""
    with Site({"/metrics": Answer(200, [_dp((10, 20)), _dp((15, 30))])}) as site:
        code, view = once_json(capsys, site.url)
    assert code == 0 and view["kv_cache_usage"] == pytest.approx(0.65)
    assert view["running"] == 7 and view["waiting"] == 2 and view["preemptions"] == 4
    assert view["requests_finished"] == 15  # (15 - 10) + (30 - 20)
    text = _text(render(build_view("http://x", Scrape.parse(_dp((1, 1)), 0.0), None, [])))
    assert "65.0%" in text and "130.0%" not in text


def test_a_nan_gauge_is_no_value(capsys):
    """A NaN gauge gave `"kv_cache_usage": NaN` (no JSON) and "nan%" in the panel."""
    body = f"vllm:num_requests_running{{{M}}} 1\nvllm:kv_cache_usage_perc{{{M}}} NaN\n"
    with Site({"/metrics": Answer(200, [body])}) as site:
        code, view = once_json(capsys, site.url)  # strict: NaN fails to parse
        line = plain_line(Monitor(site.url, gpu=False).poll())
    assert code == 0 and view["kv_cache_usage"] is None and view["running"] == 1
    assert "kv_cache=- " in line and "nan" not in line


MALFORMED = f"""# TYPE vllm:time_to_first_token_seconds histogram
vllm:time_to_first_token_seconds_bucket{{{M},le="0.1"}} 4
vllm:time_to_first_token_seconds_bucket{{{M},le="+Inf"}} 4
vllm:time_to_first_token_seconds_bucket{{{M}}} 4
vllm:num_requests_running{{{M}}} 2
this line is no sample
http_requests_total{{method="GET"}} 3
"""


def test_a_malformed_sample_is_skipped_and_counted_and_the_watch_goes_on(capsys):
    """A `_bucket` without `le` ended the watch: "mopt top: error: could not convert string to float: ''"."""
    with Site({"/metrics": Answer(200, [MALFORMED])}) as site:
        code, view = once_json(capsys, site.url)
        monitor = Monitor(site.url, gpu=False)
        views = [monitor.poll() for _ in range(3)]
    assert code == 0 and view["state"] == "ok" and view["running"] == 2
    assert view["num_malformed_samples"] == 2  # the bucket without le, the line that is no sample
    assert view["latency"]["ttft"]["p50"] == pytest.approx(0.05)  # from the well-formed buckets
    assert view["errors_by_status"] == {}  # a request count without a status is no error
    assert all(v.ok and v.num_malformed_samples == 2 for v in views)
    assert "skipped 2 malformed samples" in _text(render(views[-1]))
    assert plain_line(views[-1]).endswith(" malformed=2")


NEW_TPOT, OLD_TPOT = "vllm:request_time_per_output_token_seconds", "vllm:time_per_output_token_seconds"


def _histogram(name: str, le: float) -> str:
    """A histogram `name` of 10 observations, all in the bucket up to `le` seconds."""
    lines = [f"# TYPE {name} histogram"]
    lines += [f'{name}_bucket{{{M},le="{b}"}} {10 if b >= le else 0}' for b in (0.025, 0.05, 1.0)]
    lines += [f'{name}_bucket{{{M},le="+Inf"}} 10', f"{name}_count{{{M}}} 10", f"{name}_sum{{{M}}} 0.4"]
    return "\n".join(lines) + "\n"


@pytest.mark.parametrize(
    "histograms",
    [
        _histogram(NEW_TPOT, 0.05),  # vLLM 0.14 and mopt serve: each request's mean time per output token
        _histogram(OLD_TPOT, 0.05),  # older servers: only the old name
        _histogram(NEW_TPOT, 0.05) + _histogram(OLD_TPOT, 1.0),  # both: the per-request one
    ],
    ids=["per-request", "old-name-only", "both"],
)
def test_tpot_reads_the_per_request_histogram_and_the_old_name_only_without_it(capsys, histograms):
    body = f"vllm:num_requests_running{{{M}}} 0\n" + histograms
    with Site({"/metrics": Answer(200, [body])}) as site:
        code, view = once_json(capsys, site.url)
    assert code == 0 and 0.025 < view["latency"]["tpot"]["p50"] <= 0.05
