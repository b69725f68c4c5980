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
    num_malformed: int = 0
    """Lines the parser refused and `_bucket` samples without a numeric `le`: skipped, not fatal."""

    @classmethod
    def parse(cls, text: str, time: float) -> Scrape:
        """A ValueError only when no line of `text` is a sample (an HTML page, say); one bad line among
        good ones is skipped and counted, as a watch must outlive an odd exporter."""
        try:
            parsed, num_bad_lines = _samples(text), 0
        except ValueError:  # the parser stops at the first bad line: take the text a line at a time
            parsed, num_bad_lines = _samples_line_by_line(text)
        samples: dict[str, list] = defaultdict(list)
        num_malformed = num_bad_lines
        for s in parsed:
            if s.name.endswith("_bucket") and _bound(s.labels.get("le")) is None:
                num_malformed += 1
            elif math.isfinite(s.value):  # NaN is valid exposition for "no value": show none, not nan%
                samples[s.name].append((s.labels, s.value))
        return cls(time, dict(samples), num_malformed)

    def total(self, name: str) -> float | None:
        """Sum over every label set (every model, engine and reason), or None when the name is absent:
        for counters and for gauges that count (requests running)."""
        values = [v for _, v in self.samples.get(name, [])]
        return sum(values) if values else None

    def mean(self, name: str) -> float | None:
        """Mean over every label set, or None when the name is absent: for gauges that are a fraction
        (KV-cache usage), which summed over data-parallel engines read 130%."""
        values = [v for _, v in self.samples.get(name, [])]
        return sum(values) / len(values) if values else None

    def by_label(self, name: str, label: str) -> dict[str, float]:
        out: dict[str, float] = defaultdict(float)
        for labels, value in self.samples.get(name, []):
            out[labels.get(label, "")] += value
        return dict(out)

    def buckets(self, histogram: str) -> dict[float, float]:
        """Upper bound -> cumulative count, summed over label sets (parse kept only numeric `le`)."""
        return {_bound(le): v for le, v in self.by_label(histogram + "_bucket", "le").items()}

    def labels(self, name: str, label: str) -> list[str]:
        return sorted({labels[label] for labels, _ in self.samples.get(name, []) if label in labels})


def _samples(text: str) -> list:
    return [s for family in text_string_to_metric_families(text) for s in family.samples]


def _samples_line_by_line(text: str) -> tuple[list, int]:
    """(the samples of every line that parses alone, how many lines did not); a ValueError when none did.
    A sample keeps its name without its # TYPE line, so nothing top reads is lost."""
    samples, num_bad, first_error = [], 0, None
    for line in text.splitlines():
        if not line.strip() or line.startswith("#"):
            continue
        try:
            samples += _samples(line + "\n")
        except ValueError as exc:
            num_bad += 1
            first_error = first_error or exc
    if first_error is not None and not samples:
        raise first_error
    return samples, num_bad


def _bound(le: str | None) -> float | None:
    """A bucket's upper bound, or None for a missing, non-numeric or NaN `le`."""
    try:
        bound = float(le)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return None
    return None if math.isnan(bound) else bound


def _series(scrape: Scrape, name: str, without: str | None = None) -> dict[tuple, dict[str, float]]:
    """The samples of `name` grouped by label set less the label `without` (a histogram's `le`):
    label set -> {value of `without` (or "") -> value}. Duplicate samples are summed."""
    out: dict[tuple, dict[str, float]] = defaultdict(lambda: defaultdict(float))
    for labels, value in scrape.samples.get(name, []):
        key = tuple(sorted((k, v) for k, v in labels.items() if k != without))
        out[key][labels.get(without, "") if without else ""] += value
    return out


def _increase(now: dict[str, float], before: dict[str, float] | None) -> dict[str, float]:
    """One series' increase since `before`, as Prometheus' rate() takes it: a series that is new, or that
    fell (its process restarted: for a histogram, any of its buckets fell), counts from zero."""
    if before is None or any(value < before.get(k, 0.0) for k, value in now.items()):
        return dict(now)
    return {k: value - before.get(k, 0.0) for k, value in now.items()}


def delta(cur: Scrape, prev: Scrape | None, name: str) -> float | None:
    """Counter increase since `prev`, summed over label sets, each checked for a reset on its own: engine 0
    restarting (100 -> 5) while engine 1 counts on (100 -> 200) is 5 + 100, not a reset of the total."""
    if cur.total(name) is None or prev is None:
        return None
    before = _series(prev, name)
    return sum(sum(_increase(now, before.get(key)).values()) for key, now in _series(cur, name).items())


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
    """(bucket counts observed since `prev`, True) when there were any; else (all counts so far, False).
    Each histogram series (label set less `le`) is checked for a reset on its own, then summed by bound."""
    now = cur.buckets(histogram)
    if prev is not None:
        name = histogram + "_bucket"
        before = _series(prev, name, without="le")
        diff: dict[float, float] = defaultdict(float)
        for key, counts in _series(cur, name, without="le").items():
            for le, count in _increase(counts, before.get(key)).items():
                diff[_bound(le)] += count  # type: ignore[index] - parse kept only numeric `le`
        if diff and max(diff.values()) > 0:
            return dict(diff), True
    return now, False
