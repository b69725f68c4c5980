"""Load modes against the real streaming server: who is sent when, and how many at once.

The server's valve holds responses, so what is in flight is what the test makes it: the
assertions are on arrivals, in-flight maxima and order, and on times only as lower bounds (a
request is never sent before it is due), which hold on a fast and on a slow machine alike.
"""

import time

import pytest

from model_optimizer.optimizer.bench.load import LoadConfig, RunPlan, plan_from_config
from model_optimizer.optimizer.bench.workloads import BenchRequest
from tests.optimizer.bench.util import EARLY, InBackground, make_requests, run_plan, step_through


def pool(*prompt_lens: int) -> list[BenchRequest]:
    """Requests told apart by their prompt length."""
    return [BenchRequest(list(range(100, 100 + n)), n, 4) for n in prompt_lens]


def assert_never_early(records) -> None:
    assert all(r.send >= r.scheduled - EARLY for r in records), [(r.scheduled, r.send) for r in records]


def test_closed_loop_keeps_concurrency_in_flight(server, valve):
    with valve.held():
        run = InBackground(server.base_url, RunPlan("closed", concurrency=3, num_requests=9), pool(8, 9, 10))
        step_through(valve, 3, 9)
        records = run.join()
    assert [r.index for r in records] == list(range(9)) and all(r.ok for r in records)
    assert [r.prompt_len for r in records] == [8, 9, 10] * 3  # cycling through the pool of 3
    assert len(valve.arrivals) == 9 and valve.max_in_flight == 3  # three were in flight, never four
    for r in records[3:]:  # causality, not timing: at most 2 others were in flight when r was sent
        assert sum(o.end <= r.send for o in records if o.index < r.index) >= r.index - 2
    assert_never_early(records)


@pytest.mark.parametrize("speedup", [1.0, 2.0])
def test_trace_replay_sends_at_recorded_times(server, valve, speedup):
    stamps = [0.0, 0.05, 0.3, 0.32, 0.6]
    records = run_plan(
        server.base_url, RunPlan("trace", trace_speedup=speedup), make_requests(len(stamps), timestamps=stamps)
    )
    assert all(r.ok for r in records) and len(valve.arrivals) == len(stamps)
    assert [r.scheduled for r in records] == pytest.approx([t / speedup for t in stamps], abs=1e-9)
    assert_never_early(records)  # sent no sooner than recorded (late is allowed: a busy machine)
    sends = [r.send for r in records]
    assert sends == sorted(sends)  # in the trace's order


def test_open_loop_constant_rate_does_not_wait_for_answers(server, valve):
    rate = 40.0
    with valve.held():
        run = InBackground(server.base_url, RunPlan("constant", rate=rate, num_requests=12), make_requests(12))
        valve.wait_arrivals(12)  # all twelve arrived while not one answer was given
        assert valve.num_finished == 0 and valve.in_flight == 12
    records = run.join()
    assert all(r.ok for r in records)
    assert [r.scheduled for r in records] == pytest.approx([i / rate for i in range(12)], abs=1e-9)
    assert_never_early(records)


def test_open_loop_max_concurrency_caps_in_flight(server, valve):
    plan = RunPlan("constant", rate=1000.0, num_requests=8, max_concurrency=2)
    with valve.held():
        run = InBackground(server.base_url, plan, make_requests(8))
        step_through(valve, 2, 8)
        records = run.join()
    assert all(r.ok for r in records) and len(records) == 8
    assert len(valve.arrivals) == 8 and valve.max_in_flight == 2
    assert_never_early(records)


def test_duration_stops_sending(server, valve):
    # the only time assumption: both workers send within `duration` of the run's start (microseconds of work)
    duration = 1.0
    with valve.held():
        run = InBackground(server.base_url, RunPlan("closed", concurrency=2, duration=duration), pool(8, 9, 10))
        valve.wait_arrivals(2)
        # the run started before the first arrival: once this sleep ends, its deadline has passed
        time.sleep(max(0.0, valve.arrivals[0] + duration - time.perf_counter()) + 0.01)
    records = run.join()
    assert [r.index for r in records] == [0, 1] and all(r.ok for r in records)
    assert len(valve.arrivals) == 2  # nothing was sent after the deadline
    assert all(r.end > duration for r in records)  # the two in flight at the deadline were awaited


def test_plan_from_config_defaults():
    assert plan_from_config(LoadConfig()).num_requests == 100
    assert plan_from_config(LoadConfig(duration=3.0)).num_requests is None
    assert plan_from_config(LoadConfig(load_mode="trace")).num_requests is None
    p = plan_from_config(LoadConfig(load_mode="poisson", request_rate=5, burstiness=0.5, max_concurrency=7))
    assert (p.mode, p.rate, p.burstiness, p.max_concurrency, p.slots()) == ("poisson", 5, 0.5, 7, None)
    assert plan_from_config(LoadConfig(concurrency=9)).slots() == 9


def test_closed_loop_slots_are_capped_at_the_requests_sent():
    assert plan_from_config(LoadConfig(concurrency=10**6, num_requests=2)).slots() == 2
    assert plan_from_config(LoadConfig(concurrency=500)).slots() == 100  # the default 100 requests
    assert plan_from_config(LoadConfig(concurrency=500, duration=3.0)).slots() == 500  # requests cycle: no cap


def test_flags_at_their_defaults_are_accepted_in_every_mode():
    """Only a setting the mode would ignore is refused, never its default: a config rebuilt from a saved one
    (mopt tune --resume) names every default."""
    import dataclasses

    for cfg in (LoadConfig(), LoadConfig(request_rate=2.0, load_mode="constant"), LoadConfig(load_mode="sweep")):
        assert LoadConfig(**dataclasses.asdict(cfg)) == cfg
    LoadConfig(load_mode="closed", burstiness=1.0, trace_speedup=1.0, sweep_num_rates=5, sweep_arrival="poisson")
    LoadConfig(load_mode="sweep", burstiness=0.5, sweep_num_rates=3)  # sweep's rate runs are poisson by default


def test_an_unsorted_trace_schedule_is_in_time_order():
    import numpy as np

    from model_optimizer.optimizer.bench.load import schedule

    requests = make_requests(5, timestamps=[0.0, 10.0, 0.5, 1.0, 11.0])
    assert schedule(RunPlan("trace"), requests, np.random.default_rng(0)) == [
        (0, 0.0),
        (2, 0.5),
        (3, 1.0),
        (1, 10.0),
        (4, 11.0),
    ]
    assert schedule(RunPlan("trace", duration=5.0), requests, np.random.default_rng(0)) == [
        (0, 0.0),
        (2, 0.5),
        (3, 1.0),
    ]
