"""Helpers shared by bench tests: run one load plan against a server and get its records."""

from __future__ import annotations

import asyncio
import threading

import numpy as np

from model_optimizer.optimizer.bench.client import BenchClient, ClientConfig, RequestRecord
from model_optimizer.optimizer.bench.load import RunPlan, run_load
from model_optimizer.optimizer.bench.workloads import BenchRequest

EARLY = 1e-3  # s: float rounding of due times; asyncio never wakes a sleeper before its time otherwise


def make_requests(n: int, output_len: int = 4, prompt_len: int = 8, timestamps=None) -> list[BenchRequest]:
    return [
        BenchRequest(
            list(range(100, 100 + prompt_len)), prompt_len, output_len, None if timestamps is None else timestamps[i]
        )
        for i in range(n)
    ]


def run_plan(
    base_url: str,
    plan: RunPlan,
    requests: list[BenchRequest],
    model: str = "tiny",
    endpoint: str = "completions",
    **client_kw,
) -> list[RequestRecord]:
    cfg = ClientConfig(base_url=base_url, endpoint=endpoint, model=model, **client_kw)

    async def go() -> list[RequestRecord]:
        async with BenchClient(cfg, plan.slots(), 0.0) as client:
            bodies = [client.body(r) for r in requests]
            return await run_load(client, plan, requests, bodies, np.random.default_rng(0))

    return asyncio.run(go())


def max_in_flight(records: list[RequestRecord]) -> int:
    """Most requests whose [send, end] intervals overlap at one moment."""
    events = sorted([(r.send, 1) for r in records] + [(r.end, -1) for r in records], key=lambda e: (e[0], e[1]))
    now = peak = 0
    for _, step in events:
        now += step
        peak = max(peak, now)
    return peak


class InBackground:
    """`run_plan(...)` in a thread, so the test can steer the server (its valve) meanwhile."""

    def __init__(self, *args, **kwargs) -> None:
        self.records: list[RequestRecord] | None = None
        self.error: BaseException | None = None
        self.thread = threading.Thread(target=self._run, args=args, kwargs=kwargs, daemon=True)
        self.thread.start()

    def _run(self, *args, **kwargs) -> None:
        try:
            self.records = run_plan(*args, **kwargs)
        except BaseException as exc:  # noqa: BLE001 - re-raised in the test's thread by join()
            self.error = exc

    def join(self, timeout: float = 120.0) -> list[RequestRecord]:
        self.thread.join(timeout)
        if self.thread.is_alive():
            raise AssertionError(f"the load run did not end within {timeout:.0f} s")
        if self.error is not None:
            raise self.error
        assert self.records is not None
        return self.records


def step_through(valve, window: int, total: int) -> None:
    """With `window` responses held, let the oldest go and wait for the next arrival, until `total`
    requests arrived; then let everything go. A client that sent more than `window` at once would
    show in `valve.max_in_flight`."""
    valve.wait_arrivals(window)
    for arrived in range(window, total):
        valve.release(1)
        valve.wait_arrivals(arrived + 1)
    valve.open()
