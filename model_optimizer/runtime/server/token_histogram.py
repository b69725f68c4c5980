"""The inter-token latency histogram, observed once per streamed token: a lock-free one for a single
frontend, prometheus_client's own where several frontends sum their values (metrics.py picks)."""

from __future__ import annotations

import math
import time
from bisect import bisect_left
from collections.abc import Iterator
from typing import Any

from prometheus_client.core import HistogramMetricFamily
from prometheus_client.registry import Collector
from prometheus_client.samples import Sample
from prometheus_client.utils import floatToGoString


class TokenHistogram(Collector):
    """A histogram observed once per streamed token (inter-token latency), on the event loop only.

    prometheus_client's Histogram takes a lock and walks its buckets in Python for each observation,
    which, at one observation per token, was the largest cost of a chunk after its serialization. Here
    an observation is a bisect and two additions (no lock: the event loop is the only writer, and the
    /metrics route that reads runs on it too); the exposition is the same family, samples and
    `_created` series as a Histogram's."""

    def __init__(self, name: str, doc: str, model_name: str, buckets: tuple[float, ...], registry) -> None:
        self.name, self.doc, self.model_name = name, doc, model_name
        self.bounds = [float(b) for b in buckets] + [math.inf]
        self.counts = [0] * len(self.bounds)
        self.sum = 0.0
        self.created = time.time()
        registry.register(self)

    def observe(self, value: float, count: int = 1) -> None:
        """Observe `value` `count` times."""
        self.counts[bisect_left(self.bounds, value)] += count
        self.sum += value * count

    def collect(self) -> Iterator:
        family = HistogramMetricFamily(self.name, self.doc, labels=["model_name"])
        cumulative, buckets = 0, []
        for bound, count in zip(self.bounds, self.counts):
            cumulative += count
            buckets.append((floatToGoString(bound), cumulative))
        family.add_metric([self.model_name], buckets, self.sum)
        family.samples.append(Sample(self.name + "_created", {"model_name": self.model_name}, self.created))
        yield family


class PerTokenHistogram:
    """TokenHistogram's interface over a prometheus_client Histogram, for the multiprocess mode (where
    only prometheus_client's own metrics are summed over processes)."""

    def __init__(self, histogram: Any) -> None:
        self.histogram = histogram

    def observe(self, value: float, count: int = 1) -> None:
        for _ in range(count):
            self.histogram.observe(value)
