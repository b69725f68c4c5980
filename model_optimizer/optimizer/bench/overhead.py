"""Measure the client's own cost, so a slow client is never mistaken for a slow server.

Event-loop lag: a task asks to wake every `interval` seconds and records how late it woke;
a busy loop also delays every chunk timestamp by about that much. CPU: process CPU seconds
per wall second (1.0 is one core fully busy).
"""

from __future__ import annotations

import asyncio
import math
import time

from model_optimizer.optimizer.bench.metrics import distribution
from model_optimizer.optimizer.bench.record import RequestRecord

LAG_WARN_MS = 10.0
"""Loop or send lag (p99) above which timestamps are flagged as possibly that late."""
BOTTLENECK_LAG_MS = 50.0
"""Loop or send lag (p99) above which the client, not the server, may have set the pace."""
CPU_WARN = 0.9
"""CPU of one worker process (one event loop, one core at most) above which it may have set the pace."""
TARGET_CPU_PER_WORKER = 0.5
"""A worker with half a core of work keeps its loop lag low: the suggestion aims there."""
MIN_WALL_S = 1.0
"""CPU use over a shorter run is mostly start-up noise."""


class LoopLagMonitor:
    """Background task sampling event-loop lag; `start()` then `await stop()`."""

    def __init__(self, interval: float = 0.01) -> None:
        self.interval = interval
        self.lags: list[float] = []
        self._task: asyncio.Task | None = None
        self._cpu0 = self._wall0 = 0.0

    def start(self) -> None:
        self._cpu0, self._wall0 = time.process_time(), time.perf_counter()
        self._task = asyncio.create_task(self._run())

    async def _run(self) -> None:
        while True:
            target = time.perf_counter() + self.interval
            await asyncio.sleep(self.interval)
            self.lags.append(max(0.0, time.perf_counter() - target))

    async def stop(self) -> dict:
        """Cancel the sampler and return the lag distribution and CPU use."""
        await cancel_task(self._task)
        wall = time.perf_counter() - self._wall0
        cpu = (time.process_time() - self._cpu0) / wall if wall > 0 else 0.0
        return {"loop_lag_ms": distribution(self.lags), "cpu_per_wall_s": cpu, "wall_s": wall}


def overhead_report(records: list[RequestRecord], loops: dict | list[dict], num_cpus: int | None = None) -> dict:
    """Client overhead: loop lag, CPU and send lag (actual minus scheduled send), with warnings.

    `loops` holds one LoopLagMonitor result per worker process (a dict alone: one process). The
    report keeps each worker's figures under `workers`; `loop_lag_ms` is the worst worker's,
    `cpu_per_wall_s` their sum (cores the client used) and `cpu_per_worker_max` the busiest one's,
    which is the figure that nears 1.0 when an event loop saturates its core."""
    loops = [loops] if isinstance(loops, dict) else loops
    worst = max(loops, key=lambda x: x["loop_lag_ms"]["p99"] or 0.0)
    out = {
        "loop_lag_ms": worst["loop_lag_ms"],
        "cpu_per_wall_s": sum(x["cpu_per_wall_s"] for x in loops),
        "cpu_per_worker_max": max(x["cpu_per_wall_s"] for x in loops),
        "wall_s": max(x.get("wall_s", MIN_WALL_S) for x in loops),
        "num_workers": len(loops),
        "workers": loops,
        # a request held back by --max-concurrency waited for the server, not for the client
        "send_lag_ms": distribution([max(0.0, r.send - r.scheduled - r.queue_wait) for r in records]),
    }
    warnings = []
    lag, late = out["loop_lag_ms"]["p99"], out["send_lag_ms"]["p99"]
    if lag is not None and lag > LAG_WARN_MS:
        warnings.append(
            f"event-loop lag p99 is {lag:.1f} ms: chunk timestamps may be that late "
            "(a busy client or a CPU shared with the server)"
        )
    if late is not None and late > LAG_WARN_MS:
        warnings.append(
            f"send lag p99 is {late:.1f} ms: requests left later than scheduled, "
            "the client could not keep the arrival schedule"
        )
    reasons = bottleneck_reasons(out)
    out["client_bound"] = bool(reasons)
    out["suggested_num_workers"] = None
    if reasons:
        out["suggested_num_workers"] = suggest_num_workers(out)
        warnings.append(_bottleneck_warning(reasons, out, num_cpus))
    return out | {"warnings": warnings}


def bottleneck_reasons(report: dict) -> list[str]:
    """Why the client, not the server, may have set the pace: a lagging loop, late sends, a saturated worker."""
    reasons = []
    lag, late = report["loop_lag_ms"]["p99"], report["send_lag_ms"]["p99"]
    if lag is not None and lag > BOTTLENECK_LAG_MS:
        reasons.append(f"event-loop lag p99 {lag:.0f} ms")
    if late is not None and late > BOTTLENECK_LAG_MS:
        reasons.append(f"send lag p99 {late:.0f} ms")
    busiest = report["cpu_per_worker_max"]
    if busiest > CPU_WARN and report["wall_s"] >= MIN_WALL_S:
        who = "the client" if report["num_workers"] == 1 else "its busiest worker"
        reasons.append(f"{who} used {busiest:.2f} CPU cores")
    return reasons


def suggest_num_workers(report: dict) -> int:
    """Workers that would keep each near TARGET_CPU_PER_WORKER for the CPU this run used, and at least
    twice as many as it had (a saturated client hides how much more it would have used)."""
    needed = math.ceil(report["cpu_per_wall_s"] / TARGET_CPU_PER_WORKER)
    return max(2 * report["num_workers"], needed)


def _bottleneck_warning(reasons: list[str], report: dict, num_cpus: int | None) -> str:
    k = report["suggested_num_workers"]
    text = (
        f"the client may be the bottleneck ({'; '.join(reasons)}): the server may be faster than measured; "
        f"rerun with --num-workers {k} (or --num-workers auto)"
    )
    if num_cpus is not None and k > num_cpus:
        text += f"; this machine has {num_cpus} cores, so run the client on a larger one"
    return text


async def cancel_task(task: asyncio.Task | None) -> None:
    """Cancel a background sampler task and wait until it has stopped."""
    if task is None:
        return
    task.cancel()
    try:
        await task
    except asyncio.CancelledError:
        pass
