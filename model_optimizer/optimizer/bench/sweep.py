"""Sweep: find the server's range, then measure evenly spaced rates inside it.

1. one request at a time (closed loop, concurrency 1): the unloaded latency and lowest rate;
2. saturation (closed loop at `sweep_max_concurrency`): the highest rate the server sustains;
3. `sweep_num_rates` open-loop runs at rates evenly spaced strictly between the two.
"""

from __future__ import annotations

import numpy as np

from model_optimizer.optimizer.bench.load import DEFAULT_NUM_REQUESTS, LoadConfig, RunPlan, closed_concurrency

MIN_SPREAD = 0.01
"""Below this relative gap between the two ends there is nothing to sweep."""


def plan_sweep_rates(low_rate: float, high_rate: float, num_rates: int) -> list[float]:
    """`num_rates` rates evenly spaced strictly between `low_rate` and `high_rate`."""
    lo, hi = sorted((low_rate, high_rate))
    if lo <= 0 or (hi - lo) <= MIN_SPREAD * hi:
        return []
    return [float(r) for r in np.linspace(lo, hi, num_rates + 2)[1:-1]]


def _stop(cfg: LoadConfig) -> dict:
    if cfg.num_requests is None and cfg.duration is None:
        return {"num_requests": DEFAULT_NUM_REQUESTS, "duration": None}
    return {"num_requests": cfg.num_requests, "duration": cfg.duration}


def baseline_plan(cfg: LoadConfig) -> RunPlan:
    return RunPlan("closed", concurrency=1, label="sweep: one at a time", step=0, **_stop(cfg))


def saturation_plan(cfg: LoadConfig) -> RunPlan:
    stop = _stop(cfg)
    c = closed_concurrency(cfg.sweep_max_concurrency, stop["num_requests"])
    return RunPlan("closed", concurrency=c, label=f"sweep: saturation (concurrency {c})", step=1, **stop)


def rate_plans(cfg: LoadConfig, rates: list[float]) -> list[RunPlan]:
    return [
        RunPlan(
            cfg.sweep_arrival,
            rate=rate,
            burstiness=cfg.burstiness,
            max_concurrency=cfg.max_concurrency,
            label=f"sweep: {cfg.sweep_arrival} {rate:.3g} req/s"
            + (f" max {cfg.max_concurrency} in flight" if cfg.max_concurrency else ""),
            step=2 + k,
            **_stop(cfg),
        )
        for k, rate in enumerate(rates)
    ]
