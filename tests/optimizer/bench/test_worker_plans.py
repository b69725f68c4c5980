"""How a run is shared among worker processes, how many `auto` picks, and when the client is the bottleneck."""

from __future__ import annotations

import math

import numpy as np
import pytest

from model_optimizer.optimizer.bench import sizing
from model_optimizer.optimizer.bench.client import ClientConfig, RequestRecord
from model_optimizer.optimizer.bench.load import LoadConfig, RunPlan, schedule
from model_optimizer.optimizer.bench.overhead import overhead_report
from model_optimizer.optimizer.bench.sizing import expected_load, resolve_num_workers
from model_optimizer.optimizer.bench.workers import split_plan
from tests.optimizer.bench.util import make_requests

CFG = ClientConfig(model="m")
LOCAL, REMOTE = "http://127.0.0.1:8000", "http://bench-target.invalid:8000"


def split(plan: RunPlan, n: int, requests=None, seed: int = 0):
    requests = requests or make_requests(4)
    return split_plan(CFG, plan, requests, [b"{}"] * len(requests), np.random.default_rng(seed), n)


def test_closed_loop_splits_the_concurrency_and_shares_the_requests():
    tasks = split(RunPlan("closed", concurrency=10, num_requests=50), 4)
    assert [t.plan.concurrency for t in tasks] == [3, 3, 2, 2]
    assert all(t.arrivals is None and t.plan.num_requests == 50 for t in tasks)  # one shared request counter
    assert len(split(RunPlan("closed", concurrency=3, num_requests=50), 8)) == 3  # never a worker without a slot


def test_open_loop_deals_out_the_one_schedule():
    plan = RunPlan("poisson", rate=20.0, num_requests=11, max_concurrency=5)
    whole = schedule(plan, make_requests(4), np.random.default_rng(7))
    tasks = split(plan, 3, seed=7)
    assert [t.plan.max_concurrency for t in tasks] == [2, 2, 1]
    owned = sorted(a for t in tasks for a in t.arrivals)
    assert owned == whole  # every arrival once, at the time one process would send it
    assert [i for i, _ in tasks[1].arrivals] == [1, 4, 7, 10]
    uncapped = split(RunPlan("constant", rate=5.0, num_requests=3), 8)
    assert len(uncapped) == 3 and all(t.plan.max_concurrency is None for t in uncapped)


def test_trace_split_and_schedule_stop():
    requests = make_requests(5, timestamps=[0.0, 0.5, 1.0, 1.5, 2.0])
    tasks = split(RunPlan("trace", trace_speedup=2.0), 2, requests)
    assert tasks[0].arrivals == [(0, 0.0), (2, 0.5), (4, 1.0)] and tasks[1].arrivals == [(1, 0.25), (3, 0.75)]
    assert schedule(RunPlan("constant", rate=4.0, duration=1.0), make_requests(2), np.random.default_rng(0)) == [
        (0, 0.0),
        (1, 0.25),
        (2, 0.5),
        (3, 0.75),
    ]
    with pytest.raises(ValueError, match="needs num_requests"):
        schedule(RunPlan("constant", rate=math.inf, duration=1.0), make_requests(2), np.random.default_rng(0))


def test_num_workers_flag_is_checked():
    assert LoadConfig(num_workers="auto").num_workers == "auto"
    for bad in ("0", "-1", "two", "1.5"):
        with pytest.raises(ValueError, match="num_workers must be a positive integer or auto"):
            LoadConfig(num_workers=bad)
    with pytest.raises(ValueError, match="--duration alone never ends"):
        LoadConfig(request_rate=math.inf, duration=5.0)


def test_auto_follows_the_load_and_leaves_cpus_to_a_local_server(monkeypatch):
    monkeypatch.setattr(sizing, "num_cpus", lambda: 16)
    requests = make_requests(100, output_len=128)
    rate = RunPlan("poisson", rate=200.0, num_requests=1000)
    chunks, reqs, _ = expected_load(rate, requests)
    assert (chunks, reqs) == (200.0 * 128, 200.0)
    assert resolve_num_workers("auto", rate, requests, REMOTE)[0] == math.ceil(chunks / sizing.CHUNKS_PER_WORKER)
    assert resolve_num_workers("auto", RunPlan("poisson", rate=2.0, num_requests=10), requests, REMOTE)[0] == 1
    # a closed loop or rate inf: the streams in flight at a fast server's pace, at most what a server runs at once
    closed = RunPlan("closed", concurrency=64, num_requests=1000)
    assert resolve_num_workers("auto", closed, requests, REMOTE)[0] == math.ceil(
        64 / sizing.ASSUMED_ITL_S / sizing.CHUNKS_PER_WORKER
    )
    burst = RunPlan("poisson", rate=math.inf, num_requests=1000)
    assert expected_load(burst, requests)[0] == sizing.SERVER_MAX_RUNNING / sizing.ASSUMED_ITL_S
    wanted = math.ceil(sizing.SERVER_MAX_RUNNING / sizing.ASSUMED_ITL_S / sizing.CHUNKS_PER_WORKER)
    assert resolve_num_workers("auto", burst, requests, REMOTE)[0] == min(wanted, 16)
    monkeypatch.setattr(sizing, "num_cpus", lambda: 4)  # wants more than there are: every CPU
    n, why = resolve_num_workers("auto", burst, requests, REMOTE)
    assert n == 4 and "4 CPUs" in why
    n, why = resolve_num_workers("auto", burst, requests, LOCAL)
    assert n == 4 - sizing.LOCAL_SERVER_CPUS and "left to the local server" in why
    assert resolve_num_workers("auto", RunPlan("closed", concurrency=2, num_requests=9), requests, REMOTE)[0] == 1


def test_explicit_workers_are_capped_by_what_the_plan_keeps_busy():
    requests = make_requests(4)
    assert resolve_num_workers("4", RunPlan("closed", concurrency=16, num_requests=8), requests, LOCAL)[0] == 4
    n, why = resolve_num_workers("4", RunPlan("closed", concurrency=2, num_requests=8), requests, LOCAL)
    assert n == 2 and "2 kept busy" in why


def loop(cpu: float, lag_p99: float, wall: float = 5.0, num_requests: int = 10) -> dict:
    return {"loop_lag_ms": {"p99": lag_p99}, "cpu_per_wall_s": cpu, "wall_s": wall, "num_requests": num_requests}


def test_overhead_of_several_workers_is_their_sum_and_worst():
    recs = [RequestRecord(i, 1, 1, scheduled=0.0, send=0.001) for i in range(20)]
    report = overhead_report(recs, [loop(0.4, 3.0), loop(0.6, 7.0)])
    assert report["num_workers"] == 2 and report["cpu_per_wall_s"] == pytest.approx(1.0)
    assert report["cpu_per_worker_max"] == 0.6 and report["loop_lag_ms"]["p99"] == 7.0
    assert report["warnings"] == [] and report["client_bound"] is False  # 1.0 core in all, none of them saturated


@pytest.mark.parametrize(
    ("loops", "send", "reason"),
    [
        ([loop(0.95, 2.0)], 0.001, "the client used 0.95 CPU cores"),
        ([loop(0.3, 2.0), loop(0.97, 4.0)], 0.001, "its busiest worker used 0.97 CPU cores"),
        ([loop(0.5, 162.0)], 0.001, "event-loop lag p99 162 ms"),
        ([loop(0.5, 2.0)], 0.08, "send lag p99 80 ms"),
    ],
)
def test_a_client_bound_run_says_so_and_suggests_workers(loops, send, reason):
    recs = [RequestRecord(i, 1, 1, scheduled=0.0, send=send) for i in range(20)]
    report = overhead_report(recs, loops, num_cpus=16)
    assert report["client_bound"] is True and report["suggested_num_workers"] >= 2 * len(loops)
    [warning] = [w for w in report["warnings"] if "bottleneck" in w]
    assert reason in warning and f"--num-workers {report['suggested_num_workers']}" in warning


def test_suggestion_covers_the_cpu_used_and_names_a_small_machine():
    recs = [RequestRecord(0, 1, 1)]
    report = overhead_report(recs, [loop(0.95, 60.0) for _ in range(4)], num_cpus=4)
    assert report["suggested_num_workers"] == 8  # 3.8 cores at half a core each, and twice the 4 it had
    assert "this machine has 4 cores" in report["warnings"][-1]
    mild = overhead_report(recs, [loop(0.5, 20.0)], num_cpus=4)  # timestamps late, client not saturated
    assert mild["client_bound"] is False and mild["suggested_num_workers"] is None
    assert len(mild["warnings"]) == 1 and "event-loop lag" in mild["warnings"][0]
