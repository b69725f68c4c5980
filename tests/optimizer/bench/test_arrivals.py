"""Arrival processes checked statistically, and the sweep's rate plan."""

import itertools
import math

import numpy as np
import pytest
from scipy import stats

from model_optimizer.optimizer.bench.arrivals import arrival_times, trace_times
from model_optimizer.optimizer.bench.load import LoadConfig
from model_optimizer.optimizer.bench.sweep import baseline_plan, plan_sweep_rates, rate_plans, saturation_plan


def gaps(pattern, rate, n=4000, burstiness=1.0, seed=0):
    times = list(itertools.islice(arrival_times(np.random.default_rng(seed), rate, pattern, burstiness), n + 1))
    return np.diff(times)


def test_poisson_gaps_are_exponential_ks():
    rate = 20.0
    g = gaps("poisson", rate)
    assert stats.kstest(g, "expon", args=(0, 1 / rate)).pvalue > 0.01
    assert g.mean() == pytest.approx(1 / rate, rel=0.05)
    # the test has power: a rate 30% off is rejected
    assert stats.kstest(g, "expon", args=(0, 1 / (rate * 1.3))).pvalue < 1e-6


def test_bursty_gaps_follow_gamma_with_same_mean():
    rate, b = 10.0, 0.5
    g = gaps("poisson", rate, burstiness=b)
    assert stats.kstest(g, "gamma", args=(b, 0, 1 / (rate * b))).pvalue > 0.01
    assert stats.kstest(g, "expon", args=(0, 1 / rate)).pvalue < 1e-6
    assert g.mean() == pytest.approx(1 / rate, rel=0.1)
    assert g.std() > 1.2 / rate  # burstier than Poisson (whose std is 1/rate)


def test_constant_and_infinite_rates():
    assert gaps("constant", 4.0, n=10) == pytest.approx([0.25] * 10)
    first = list(itertools.islice(arrival_times(np.random.default_rng(0), math.inf, "poisson"), 5))
    assert first == [0.0] * 5
    with pytest.raises(ValueError, match="request_rate"):
        next(arrival_times(np.random.default_rng(0), 0.0, "poisson"))


def test_trace_times_speedup():
    assert list(trace_times([0.0, 1.0, 3.0], 2.0)) == [0.0, 0.5, 1.5]
    with pytest.raises(ValueError, match="trace_speedup"):
        list(trace_times([0.0], 0))


def test_sweep_rates_are_evenly_spaced_strictly_inside():
    assert plan_sweep_rates(1.0, 10.0, 3) == pytest.approx([3.25, 5.5, 7.75])
    assert plan_sweep_rates(10.0, 1.0, 2) == pytest.approx([4.0, 7.0])
    assert plan_sweep_rates(5.0, 5.02, 4) == []  # saturation no faster than one at a time
    assert plan_sweep_rates(0.0, 5.0, 4) == []


def test_sweep_plans_carry_the_stop_condition():
    cfg = LoadConfig(load_mode="sweep", duration=2.0, sweep_max_concurrency=64, sweep_arrival="constant")
    assert baseline_plan(cfg).concurrency == 1 and baseline_plan(cfg).duration == 2.0
    assert saturation_plan(cfg).concurrency == 64
    plans = rate_plans(cfg, [1.5, 3.0])
    assert [(p.mode, p.rate, p.duration, p.num_requests) for p in plans] == [
        ("constant", 1.5, 2.0, None),
        ("constant", 3.0, 2.0, None),
    ]
    assert baseline_plan(LoadConfig(load_mode="sweep")).num_requests == 100


def test_load_config_rejects_bad_values():
    with pytest.raises(ValueError, match="needs --request-rate"):
        LoadConfig(load_mode="poisson")
    with pytest.raises(ValueError, match="load_mode must be one of"):
        LoadConfig(load_mode="burst")
    with pytest.raises(ValueError, match="concurrency"):
        LoadConfig(concurrency=0)
    with pytest.raises(ValueError, match="duration"):
        LoadConfig(duration=-1.0)


def test_load_mode_follows_the_flags_given():
    assert (LoadConfig().load_mode, LoadConfig().concurrency) == ("closed", 1)
    assert LoadConfig(request_rate=4.0).load_mode == "poisson"  # vLLM: a rate means an open loop
    capped = LoadConfig(max_concurrency=8)  # vLLM's name for requests in flight; ignored before
    assert (capped.load_mode, capped.concurrency, capped.max_concurrency) == ("closed", 8, None)
    assert LoadConfig(request_rate=4.0, max_concurrency=8).max_concurrency == 8
    with pytest.raises(ValueError, match="load mode trace does not use it"):
        LoadConfig(load_mode="trace", concurrency=2)
