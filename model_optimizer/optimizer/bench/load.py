"""How hard to push: closed loop at a fixed concurrency, open loop at a rate, trace replay, sweep.

A closed loop keeps `concurrency` requests in flight, sending the next as soon as one ends.
An open loop sends at arrival times that do not wait for answers (optionally capped at
`max_concurrency` in flight), so queueing at the server shows up in the latencies.

`run_load` runs a whole plan in this process; `run_closed` and `run_open` are its two halves,
which a worker process (workers.py) also runs on its share of a plan.
"""

from __future__ import annotations

import asyncio
import itertools
import math
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Literal

import numpy as np

from model_optimizer.optimizer.bench.arrivals import arrival_times, trace_times
from model_optimizer.optimizer.bench.client import BenchClient
from model_optimizer.optimizer.bench.record import RequestRecord
from model_optimizer.optimizer.bench.workloads import BenchRequest, non_default_flags
from model_optimizer.runtime.config import check_choice

DEFAULT_NUM_REQUESTS = 100


@dataclass
class LoadConfig:
    """When to send requests and when to stop."""

    load_mode: Literal["auto", "closed", "constant", "poisson", "trace", "sweep"] = "auto"
    """closed: fixed concurrency; constant or poisson: open loop at --request-rate; trace: the trace's timestamps; sweep: one-at-a-time, saturation, then rates in between; auto: poisson when --request-rate is given (as in vLLM), else closed."""

    concurrency: int | None = None
    """Requests kept in flight in closed-loop mode (default: --max-concurrency when given, else 1)."""

    request_rate: float | None = None
    """Requests per second for constant and poisson modes (inf sends everything at once)."""

    burstiness: float = 1.0
    """Gamma shape of Poisson gaps: 1 is Poisson, below 1 burstier, above 1 more regular."""

    max_concurrency: int | None = None
    """Cap on requests in flight in open-loop and trace modes (default: no cap); in closed mode, vLLM's name for --concurrency."""

    num_requests: int | None = None
    """Stop after sending this many requests (default 100 when no duration is given; a trace: all of it)."""

    duration: float | None = None
    """Stop sending after this many seconds; requests in flight are awaited."""

    trace_speedup: float = 1.0
    """Replay a trace this many times faster than recorded."""

    sweep_num_rates: int = 5
    """Evenly spaced request rates a sweep measures between one-at-a-time and saturation."""

    sweep_max_concurrency: int = 256
    """Concurrency of the sweep's saturation run."""

    sweep_arrival: Literal["poisson", "constant"] = "poisson"
    """Arrival pattern of the sweep's rate runs."""

    num_warmups: int = 0
    """Requests of the workload's shape sent before the first measured run and not counted (vLLM's --num-warmups): compile, first-use and allocator costs land there."""

    num_workers: str = "1"
    """Client processes sending the load, N or auto (one per ~10k chunks/s the load may bring, at most the CPUs this machine can spare): more than 1 when one core cannot keep up with a fast server."""

    def __post_init__(self) -> None:
        check_choice(self, "load_mode", "sweep_arrival")
        if self.load_mode == "auto":
            self.load_mode = "poisson" if self.request_rate is not None else "closed"
        if self.load_mode in ("constant", "poisson") and self.request_rate is None:
            raise ValueError(f"load mode {self.load_mode} needs --request-rate")
        if self.request_rate is not None and not self.request_rate > 0:
            raise ValueError(f"request_rate must be positive, got {self.request_rate}")
        for name in ("sweep_num_rates", "sweep_max_concurrency"):
            if getattr(self, name) <= 0:
                raise ValueError(f"{name} must be a positive integer, got {getattr(self, name)}")
        for name in ("concurrency", "max_concurrency", "num_requests"):
            if getattr(self, name) is not None and getattr(self, name) <= 0:
                raise ValueError(f"{name} must be a positive integer, got {getattr(self, name)}")
        if self.num_warmups < 0:
            raise ValueError(f"num_warmups must be >= 0 (0: no warm-up), got {self.num_warmups}")
        self._check_mode_flags()
        check_num_workers(self.num_workers)
        if self.request_rate == math.inf and self.duration is not None and self.num_requests is None:
            raise ValueError(
                "request rate inf sends every request at once, so --duration alone never ends the run: "
                "give --num-requests"
            )
        for name in ("burstiness", "trace_speedup", "duration"):
            value = getattr(self, name)
            if value is not None and not (value > 0 and math.isfinite(value)):
                raise ValueError(f"{name} must be a positive number, got {value}")

    def _check_mode_flags(self) -> None:
        """Refuse flags the chosen load mode would ignore, instead of ignoring them without a word."""
        mode = self.load_mode
        if self.request_rate is not None and mode not in ("constant", "poisson"):
            raise ValueError(
                f"--request-rate sets the arrival rate of load modes constant and poisson; load mode "
                f"{mode} does not use it (leave --load-mode out to get poisson at that rate)"
            )
        if mode == "closed":
            if (
                self.concurrency is not None
                and self.max_concurrency is not None
                and self.concurrency != self.max_concurrency
            ):
                raise ValueError(
                    f"in closed mode --max-concurrency (vLLM's name) is the number of requests in flight, "
                    f"like --concurrency: give one of them, not {self.concurrency} and {self.max_concurrency}"
                )
            self.concurrency = self.concurrency or self.max_concurrency or 1
            self.max_concurrency = None
        elif self.concurrency is not None:
            raise ValueError(
                f"--concurrency sets closed-loop mode's requests in flight; load mode {mode} does not use "
                "it (--max-concurrency caps requests in flight of open-loop and trace runs)"
            )
        self._check_shape_flags()

    def _check_shape_flags(self) -> None:
        """Refuse a burstiness, trace speed-up or sweep setting (other than its default) that the mode
        would ignore: a run that looked bursty, faster or swept but was not."""
        mode = self.load_mode
        poisson = mode == "poisson" or (mode == "sweep" and self.sweep_arrival == "poisson")
        if not poisson and non_default_flags(self, "burstiness"):
            what = "--sweep-arrival constant" if mode == "sweep" else f"load mode {mode}"
            raise ValueError(f"--burstiness shapes the gaps of poisson arrivals; {what} does not use it")
        if mode != "trace" and non_default_flags(self, "trace_speedup"):
            raise ValueError(
                f"--trace-speedup sets the replay speed of load mode trace; load mode {mode} does not use it"
            )
        sweep_flags = non_default_flags(self, "sweep_num_rates", "sweep_max_concurrency", "sweep_arrival")
        if mode != "sweep" and sweep_flags:
            raise ValueError(f"load mode {mode} does not use {', '.join(sweep_flags)} (settings of load mode sweep)")


def check_num_workers(value: str) -> None:
    """`num_workers` is auto or a positive integer."""
    if value != "auto" and not (value.isascii() and value.isdigit() and int(value) > 0):
        raise ValueError(f"num_workers must be a positive integer or auto, got {value!r}")


@dataclass
class RunPlan:
    """One measured run: a load pattern and its stop condition."""

    mode: str
    """closed, constant, poisson or trace."""
    concurrency: int | None = None
    rate: float | None = None
    burstiness: float = 1.0
    max_concurrency: int | None = None
    num_requests: int | None = None
    duration: float | None = None
    trace_speedup: float = 1.0
    label: str = ""
    step: int | None = None
    """A sweep's step (0: one at a time, 1: saturation, 2...: the rates in between); None outside a sweep.
    `mopt bench compare` pairs two sweeps' runs by it, since their labels hold the rates each measured."""

    def stop(self, index: int, elapsed: float) -> bool:
        """True once request `index`, due `elapsed` seconds into the run, should not be sent."""
        if self.num_requests is not None and index >= self.num_requests:
            return True
        return self.duration is not None and elapsed >= self.duration

    def slots(self) -> int | None:
        """Closed-loop workers (each keeps one request in flight); None for open loops."""
        return self.concurrency if self.mode == "closed" else None


def plan_from_config(cfg: LoadConfig) -> RunPlan:
    """The single run of a non-sweep load config."""
    num = cfg.num_requests
    if num is None and cfg.duration is None and cfg.load_mode != "trace":
        num = DEFAULT_NUM_REQUESTS
    plan = RunPlan(cfg.load_mode, num_requests=num, duration=cfg.duration, trace_speedup=cfg.trace_speedup)
    if cfg.load_mode == "closed":
        concurrency = closed_concurrency(cfg.concurrency or 1, num)
        plan.concurrency, plan.label = concurrency, f"concurrency {concurrency}"
    elif cfg.load_mode == "trace":
        plan.max_concurrency, plan.label = cfg.max_concurrency, f"trace x{cfg.trace_speedup:g}"
    else:
        plan.rate, plan.burstiness, plan.max_concurrency = cfg.request_rate, cfg.burstiness, cfg.max_concurrency
        plan.label = f"{cfg.load_mode} {cfg.request_rate:g} req/s"
    if plan.max_concurrency:
        plan.label += f" max {plan.max_concurrency} in flight"
    return plan


def closed_concurrency(concurrency: int, num_requests: int | None) -> int:
    """A closed loop's slots: at most one per request sent. Each slot has its own connection (and an
    httpx client per 8), so 1,000,000 slots for 2 requests took 45 s and 3 GB before the first was sent."""
    return min(concurrency, num_requests) if num_requests else concurrency


def schedule(plan: RunPlan, requests: list[BenchRequest], rng: np.random.Generator) -> list[tuple[int, float]]:
    """Every (request index, send offset in seconds from the start) of an open-loop or trace plan, in
    send order, up to its stop.

    A trace is sent in the order of its timestamps (a stable sort: ties keep the file's order), so a
    request listed after a later one is not sent late, and a duration stops at the first request due
    after it. Drawn before the clock starts, so a run split over worker processes sends at the same times."""
    if plan.mode == "trace":
        stamps = [r.timestamp or 0.0 for r in requests]
        order = sorted(range(len(requests)), key=stamps.__getitem__)
        arrivals: Iterable[tuple[int, float]] = zip(order, trace_times([stamps[i] for i in order], plan.trace_speedup))
    else:
        if plan.num_requests is None and (plan.duration is None or math.isinf(plan.rate or 0.0)):
            raise ValueError(
                f"{plan.label or plan.mode}: an open loop needs num_requests (or a finite rate and a duration)"
            )
        arrivals = enumerate(arrival_times(rng, plan.rate, plan.mode, plan.burstiness))  # type: ignore[arg-type]
    out: list[tuple[int, float]] = []
    for sent, (i, offset) in enumerate(arrivals):
        if plan.stop(sent, offset):
            break
        out.append((i, offset))
    return out


async def run_load(
    client: BenchClient,
    plan: RunPlan,
    requests: list[BenchRequest],
    bodies: list[bytes],
    rng: np.random.Generator,
    on_record: Callable[[RequestRecord], None] = lambda r: None,
) -> list[RequestRecord]:
    """Run `plan` with `client` and return every record, in request order."""
    records: list[RequestRecord] = []

    def done(rec: RequestRecord) -> None:
        records.append(rec)
        on_record(rec)

    client.t0 = time.perf_counter()
    if plan.mode == "closed":
        await run_closed(client, plan, requests, bodies, itertools.count().__next__, done)
    else:
        await run_open(client, plan, requests, bodies, schedule(plan, requests, rng), done)
    return sorted(records, key=lambda r: r.index)


async def run_closed(
    client: BenchClient,
    plan: RunPlan,
    requests: list[BenchRequest],
    bodies: list[bytes],
    next_index: Callable[[], int],
    done: Callable[[RequestRecord], None],
) -> None:
    """Keep `plan.concurrency` requests in flight from `client.t0` on; each freed slot sends request
    `next_index()` (a counter this process owns, or one all worker processes share)."""

    async def slot_loop(slot: int) -> None:
        while not client.stop.is_set():
            now = time.perf_counter()
            i = next_index()
            if plan.stop(i, now - client.t0):
                return
            done(await client.send(i, requests[i % len(requests)], bodies[i % len(bodies)], now, slot))

    await asyncio.gather(*(slot_loop(slot) for slot in range(plan.concurrency or 1)))


async def run_open(
    client: BenchClient,
    plan: RunPlan,
    requests: list[BenchRequest],
    bodies: list[bytes],
    arrivals: Iterable[tuple[int, float]],
    done: Callable[[RequestRecord], None],
) -> None:
    """Send request i at `client.t0 + offset` for each (i, offset) of `arrivals`, whatever the answers do
    (at most `plan.max_concurrency` in flight when set).

    A request's `scheduled` stays its arrival time; one held back by the cap records how long it waited
    for a slot as its `queue_wait`. Nothing is sent once `plan.duration` has passed on the clock or the run is stopped
    (a cap or a slow client can push arrivals past it): those arrivals count in `client.stop.num_unsent`."""
    slots = asyncio.Semaphore(plan.max_concurrency) if plan.max_concurrency else None
    tasks: set[asyncio.Task] = set()
    stop = client.stop

    def too_late() -> bool:
        return stop.is_set() or (plan.duration is not None and time.perf_counter() - client.t0 >= plan.duration)

    async def one(i: int, due: float) -> None:
        req, body = requests[i % len(requests)], bodies[i % len(bodies)]
        if slots is None:
            done(await client.send(i, req, body, due))
            return
        waiting_since = time.perf_counter()
        async with slots:
            if too_late():
                stop.num_unsent += 1
                return
            queue_wait = time.perf_counter() - waiting_since  # the client's own lateness stays send lag
            rec = await client.send(i, req, body, due)
            rec.queue_wait = queue_wait
            done(rec)

    arrivals = list(arrivals)
    for k, (i, offset) in enumerate(arrivals):
        due = client.t0 + offset
        # sleep(0) still yields when behind schedule, so started requests make progress
        await stop.sleep(due - time.perf_counter())
        if too_late():
            stop.num_unsent += len(arrivals) - k
            break
        task = asyncio.create_task(one(i, due))
        tasks.add(task)
        task.add_done_callback(tasks.discard)
    if tasks:
        await asyncio.gather(*tasks)


RATE_TOLERANCE = 0.1
"""An open loop whose sends came this much (10 %) slower than its schedule fell behind it..."""
MIN_LAG_S = 0.1
"""...and at least this much later in all: a millisecond of the client's own jitter on a short run at a
high rate is not falling behind."""


def schedule_check(plan: RunPlan, records: list[RequestRecord], loops: list[dict]) -> dict | None:
    """Whether an open-loop or trace run kept its schedule; None for a closed loop.

    `scheduled_rate` is the drawn schedule's own rate over the requests sent (a Poisson draw of few
    requests is off the requested rate by chance, not by the client's fault); `attempted_rate` is the
    rate they were actually sent at. The run fell `behind` when sending them took RATE_TOLERANCE (and
    MIN_LAG_S) longer than their schedule (a --max-concurrency cap the server keeps full, or a client
    too slow), or when arrivals were left unsent because --duration passed first."""
    if plan.mode == "closed":
        return None
    num_unsent = sum(loop.get("num_unsent", 0) for loop in loops)
    out = {
        "requested_rate": plan.rate,
        "scheduled_rate": None,
        "attempted_rate": None,
        "num_unsent": num_unsent,
        "queue_wait_p99_ms": None,
        "behind": False,
    }
    if records:
        waits = sorted(r.queue_wait for r in records)
        out["queue_wait_p99_ms"] = waits[min(len(waits) - 1, int(0.99 * len(waits)))] * 1e3
    if len(records) >= 2:
        sched = max(r.scheduled for r in records) - min(r.scheduled for r in records)
        sent = max(r.send for r in records) - min(r.send for r in records)
        if sched > 0 and sent > 0:
            out["scheduled_rate"] = (len(records) - 1) / sched
            out["attempted_rate"] = (len(records) - 1) / sent
            out["behind"] = sent - sched > max(RATE_TOLERANCE * sched, MIN_LAG_S)
    stopped = any(loop.get("stopped") for loop in loops)
    out["behind"] = bool(out["behind"] or (num_unsent > 0 and not stopped))
    return out
