"""Measure the client's own cost, so a slow client is never mistaken for a slow server.

Event-loop lag: a task asks to wake every `interval` seconds and records how late it woke;
a busy loop also delays every chunk timestamp by about that much. CPU: process CPU seconds
per wall second (1.0 is one core fully busy).
"""

from __future__ import annotations

import asyncio
import time

from model_optimizer.optimizer.bench.client import RequestRecord
from model_optimizer.optimizer.bench.metrics import distribution

LAG_WARN_MS = 10.0
CPU_WARN = 0.9
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


def overhead_report(records: list[RequestRecord], loop: dict) -> dict:
    """Client overhead: loop lag, CPU and send lag (actual minus scheduled send), with warnings."""
    send_lag = distribution([max(0.0, r.send - r.scheduled) for r in records])
    warnings = []
    lag, late = loop["loop_lag_ms"]["p99"], send_lag["p99"]
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
    if loop["cpu_per_wall_s"] > CPU_WARN and loop.get("wall_s", MIN_WALL_S) >= MIN_WALL_S:
        warnings.append(f"the client used {loop['cpu_per_wall_s']:.2f} CPU cores: it may be the bottleneck")
    return loop | {"send_lag_ms": send_lag, "warnings": warnings}


async def cancel_task(task: asyncio.Task | None) -> None:
    """Cancel a background sampler task and wait until it has stopped."""
    if task is None:
        return
    task.cancel()
    try:
        await task
    except asyncio.CancelledError:
        pass
