"""TokenHistogram (the per-token inter-token latency histogram) exposes what prometheus_client's Histogram does."""

from __future__ import annotations

import random

from prometheus_client import CollectorRegistry, Histogram, generate_latest

from model_optimizer.runtime.server.metrics import ITL_BUCKETS
from model_optimizer.runtime.server.token_histogram import TokenHistogram


def exposition(registry: CollectorRegistry) -> list[str]:
    """Sample lines with the `_created` timestamps' values left out (they differ by when each was made)."""
    lines = generate_latest(registry).decode().splitlines()
    return [line.rsplit(" ", 1)[0] if "_created{" in line else line for line in lines]


def test_same_exposition_as_a_prometheus_histogram():
    ours, theirs = CollectorRegistry(auto_describe=True), CollectorRegistry(auto_describe=True)
    name, doc = "vllm:inter_token_latency_seconds", "Time between output tokens."
    fast = TokenHistogram(name, doc, "tiny", ITL_BUCKETS, ours)
    reference = Histogram(name, doc, ["model_name"], buckets=ITL_BUCKETS, registry=theirs).labels("tiny")
    rng = random.Random(0)
    values = [0.0, 0.001, 0.005, 10.0, 11.0] + [rng.expovariate(50.0) for _ in range(300)]
    for value in values:
        count = rng.randint(1, 3)
        fast.observe(value, count)
        for _ in range(count):
            reference.observe(value)
    got, want = exposition(ours), exposition(theirs)
    sums = [i for i, line in enumerate(want) if "_sum{" in line]
    assert len(sums) == 1
    for i in sums:  # the same sum, added in another order
        assert abs(float(got[i].rsplit(" ", 1)[1]) - float(want[i].rsplit(" ", 1)[1])) < 1e-9
        got[i] = want[i]
    assert got == want
