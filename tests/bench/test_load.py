"""Load modes against the real streaming server: who is sent when, and how many at once."""

import numpy as np

from model_optimizer.bench.load import LoadConfig, RunPlan, plan_from_config
from tests.bench.conftest import ITL, TTFT
from tests.bench.util import make_requests, max_in_flight, run_plan

ONE_REQUEST = TTFT + 3 * ITL  # output_len 4
LATE = 0.06  # how late a send may be on a busy 2-core machine; it is never early


def assert_sent_on_time(sends, due):
    lags = np.asarray(sends) - np.asarray(due)
    assert lags.min() >= -0.002, f"sent early: {lags}"
    assert lags.max() <= LATE, f"sent late: {lags}"
    assert np.median(lags) <= LATE / 3, f"sent late: {lags}"


def test_closed_loop_keeps_concurrency_in_flight(server):
    records = run_plan(server.base_url, RunPlan("closed", concurrency=3, num_requests=9), make_requests(9))
    assert len(records) == 9 and [r.index for r in records] == list(range(9))
    assert max_in_flight(records) == 3
    # three waves of three: the run lasts about three request times, not one or nine
    span = max(r.end for r in records) - min(r.send for r in records)
    assert 3 * ONE_REQUEST <= span < 5 * ONE_REQUEST
    # each worker sends its next request right after the previous one ends
    assert max(r.send - r.scheduled for r in records) < LATE


def test_trace_replay_sends_at_recorded_times(server):
    stamps = [0.0, 0.05, 0.3, 0.32, 0.6]
    reqs = make_requests(len(stamps), timestamps=stamps)
    records = run_plan(server.base_url, RunPlan("trace"), reqs)
    assert_sent_on_time([r.send for r in records], stamps)
    fast = run_plan(server.base_url, RunPlan("trace", trace_speedup=2.0), reqs)
    assert_sent_on_time([r.send for r in fast], [t / 2 for t in stamps])
    assert all(r.ok for r in records + fast)


def test_open_loop_constant_rate_does_not_wait_for_answers(server):
    rate = 40.0  # a request every 25 ms while each takes ~140 ms: several overlap
    records = run_plan(server.base_url, RunPlan("constant", rate=rate, num_requests=12), make_requests(12))
    assert_sent_on_time([r.send for r in records], [i / rate for i in range(12)])
    assert max_in_flight(records) >= 4


def test_open_loop_max_concurrency_caps_in_flight(server):
    plan = RunPlan("constant", rate=1000.0, num_requests=8, max_concurrency=2)
    records = run_plan(server.base_url, plan, make_requests(8))
    assert all(r.ok for r in records)
    assert max_in_flight(records) == 2


def test_duration_stops_sending(server):
    records = run_plan(server.base_url, RunPlan("closed", concurrency=2, duration=0.5), make_requests(3))
    assert max(r.send for r in records) < 0.5
    assert len(records) >= 2 * int(0.5 / ONE_REQUEST)  # requests cycle through the pool of 3
    assert max(r.end for r in records) > 0.5  # requests in flight at the deadline were awaited


def test_plan_from_config_defaults():
    assert plan_from_config(LoadConfig()).num_requests == 100
    assert plan_from_config(LoadConfig(duration=3.0)).num_requests is None
    assert plan_from_config(LoadConfig(load_mode="trace")).num_requests is None
    p = plan_from_config(LoadConfig(load_mode="poisson", request_rate=5, burstiness=0.5, max_concurrency=7))
    assert (p.mode, p.rate, p.burstiness, p.max_concurrency, p.slots()) == ("poisson", 5, 0.5, 7, None)
    assert plan_from_config(LoadConfig(concurrency=9)).slots() == 9
