"""Counter resets are per series, as Prometheus' rate() takes them: one data-parallel engine restarting
must not make the other's progress look like a reset of the whole total."""

from __future__ import annotations

import pytest

from model_optimizer.optimizer.top.metrics import Scrape, delta, quantile, window_buckets
from model_optimizer.optimizer.top.view import build_view


def _finished(counts: tuple[int, ...], time: float) -> Scrape:
    lines = [
        f'vllm:request_success_total{{model_name="m",engine="{i}",finished_reason="stop"}} {n}'
        for i, n in enumerate(counts)
    ]
    return Scrape.parse("\n".join(lines) + "\n", time)


def test_one_engine_restarting_does_not_hide_the_others_requests():
    """Engine 0 100 -> 5 (restarted), engine 1 100 -> 200: 5 + 100 finished, not 5 (the new total)."""
    assert delta(_finished((5, 200), 10.0), _finished((100, 100), 0.0), "vllm:request_success_total") == 105
    view = build_view("http://x", _finished((5, 200), 10.0), _finished((100, 100), 0.0), [])
    assert view.requests_finished == 105 and view.request_rate == pytest.approx(10.5)


def test_plain_increases_new_series_and_absent_names():
    name = "vllm:request_success_total"
    assert delta(_finished((110, 130), 1.0), _finished((100, 100), 0.0), name) == 40
    assert delta(_finished((110, 7), 1.0), _finished((100,), 0.0), name) == 17  # engine 1 appeared: from zero
    assert delta(_finished((1,), 1.0), None, name) is None
    assert delta(Scrape.parse("other 1\n", 1.0), _finished((1,), 0.0), name) is None


def _histogram(per_engine: dict[str, dict[str, int]], time: float) -> Scrape:
    lines = [
        f'vllm:e2e_request_latency_seconds_bucket{{model_name="m",engine="{engine}",le="{le}"}} {count}'
        for engine, buckets in per_engine.items()
        for le, count in buckets.items()
    ]
    return Scrape.parse("\n".join(lines) + "\n", time)


def test_histogram_resets_are_per_series():
    """Engine 0 restarts (its buckets fall) while engine 1 observes 10 more slow requests: the window holds
    engine 0's new 2 fast ones and engine 1's 10, not "no window" (a bucket fell) nor the totals so far."""
    before = _histogram({"0": {"0.1": 50, "1.0": 60, "+Inf": 60}, "1": {"0.1": 0, "1.0": 40, "+Inf": 40}}, 0.0)
    after = _histogram({"0": {"0.1": 2, "1.0": 2, "+Inf": 2}, "1": {"0.1": 0, "1.0": 50, "+Inf": 50}}, 10.0)
    buckets, in_window = window_buckets(after, before, "vllm:e2e_request_latency_seconds")
    assert in_window and buckets == {0.1: 2, 1.0: 12, float("inf"): 12}
    assert quantile(0.5, buckets) == pytest.approx(0.1 + 0.9 * (6 - 2) / 10)


def test_a_series_counts_as_reset_when_any_of_its_buckets_falls():
    """A restarted engine whose +Inf count is already past the old one is still a reset: its 0.1 bucket fell."""
    before = _histogram({"0": {"0.1": 5, "+Inf": 5}}, 0.0)
    after = _histogram({"0": {"0.1": 3, "+Inf": 8}}, 1.0)
    buckets, in_window = window_buckets(after, before, "vllm:e2e_request_latency_seconds")
    assert in_window and buckets == {0.1: 3, float("inf"): 8}


def test_no_new_observation_falls_back_to_the_totals():
    same = _histogram({"0": {"0.1": 5, "+Inf": 5}}, 0.0)
    buckets, in_window = window_buckets(same, same, "vllm:e2e_request_latency_seconds")
    assert not in_window and buckets == {0.1: 5, float("inf"): 5}
