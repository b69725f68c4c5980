"""Prometheus text -> samples, and the window statistics `mopt top` shows: rates from counter deltas,
percentiles from histogram bucket deltas (as Prometheus' histogram_quantile does it)."""

from __future__ import annotations

import math
from collections import defaultdict
from dataclasses import dataclass, field

from prometheus_client.parser import text_string_to_metric_families


@dataclass
class Scrape:
    """One /metrics reading: sample name -> [(labels, value)], and when it was taken (time.monotonic())."""

    time: float
    samples: dict[str, list[tuple[dict[str, str], float]]] = field(default_factory=dict)

    @classmethod
    def parse(cls, text: str, time: float) -> Scrape:
        samples: dict[str, list] = defaultdict(list)
        for family in text_string_to_metric_families(text):
            for s in family.samples:
                samples[s.name].append((s.labels, s.value))
        return cls(time, dict(samples))

    def total(self, name: str) -> float | None:
        """Sum over every label set (every model, engine and reason), or None when the name is absent."""
        values = [v for _, v in self.samples.get(name, [])]
        return sum(values) if values else None

    def by_label(self, name: str, label: str) -> dict[str, float]:
        out: dict[str, float] = defaultdict(float)
        for labels, value in self.samples.get(name, []):
            out[labels.get(label, "")] += value
        return dict(out)

    def buckets(self, histogram: str) -> dict[float, float]:
        """Upper bound -> cumulative count, summed over label sets."""
        return {float(le): v for le, v in self.by_label(histogram + "_bucket", "le").items()}

    def labels(self, name: str, label: str) -> list[str]:
        return sorted({labels[label] for labels, _ in self.samples.get(name, []) if label in labels})


def delta(cur: Scrape, prev: Scrape | None, name: str) -> float | None:
    """Counter increase since `prev` (a counter reset counts from zero)."""
    now = cur.total(name)
    if now is None or prev is None:
        return None
    before = prev.total(name)
    if before is None or now < before:
        return now
    return now - before


def quantile(q: float, buckets: dict[float, float]) -> float | None:
    """The q-quantile of cumulative `buckets` by linear interpolation inside the bucket that holds it."""
    bounds = sorted(buckets)
    if not bounds or buckets[bounds[-1]] <= 0:
        return None
    rank = q * buckets[bounds[-1]]
    lower, below = 0.0, 0.0
    for bound in bounds:
        count = buckets[bound]
        if count >= rank:
            if math.isinf(bound):
                return lower  # above the highest finite bucket: its bound is all we know
            if count == below:
                return bound
            return lower + (bound - lower) * (rank - below) / (count - below)
        lower, below = bound, count
    return lower


def window_buckets(cur: Scrape, prev: Scrape | None, histogram: str) -> tuple[dict[float, float], bool]:
    """(bucket counts observed since `prev`, True) when there were any; else (all counts so far, False)."""
    now = cur.buckets(histogram)
    if prev is not None:
        before = prev.buckets(histogram)
        diff = {le: count - before.get(le, 0.0) for le, count in now.items()}
        if diff and all(v >= 0 for v in diff.values()) and max(diff.values()) > 0:
            return diff, True
    return now, False
