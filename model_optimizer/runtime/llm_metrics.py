"""`LLM.get_metrics()`: the engine's gauges and counters in this process, in the shapes vLLM's offline reader
gives them (vllm/v1/metrics/reader.py), so a script written for vLLM's `llm.get_metrics()` reads ours.

The values come from the collector behind the server's /metrics (server/engine_collector.py), run over the
engine's stats now: one list of names for both, under the names /metrics uses. `read_metrics` turns any
Prometheus metric families into these shapes: the collector's, or those parsed from a server's /metrics text
(`prometheus_client.parser.text_string_to_metric_families`).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from prometheus_client.metrics_core import Metric as MetricFamily
from prometheus_client.samples import Sample

from model_optimizer.runtime.engine.engine import LLMEngine
from model_optimizer.runtime.server.engine_collector import EngineCollector
from model_optimizer.runtime.spec_decode.config import SpeculativeConfig

PER_POSITION = "vllm:spec_decode_num_accepted_tokens_per_pos"
"""The one counter read as a Vector: its `position` label becomes the index into `values`."""


@dataclass
class Metric:
    """One series: a metric's name (no `_total` suffix) and its labels (`model_name`, ...)."""

    name: str
    labels: dict[str, str]


@dataclass
class Counter(Metric):
    """A count since start: an int, as vLLM's; a float for the counters of seconds (`mopt:*_seconds`)."""

    value: int | float


@dataclass
class Gauge(Metric):
    """A value now, which may go down (running requests, KV-cache usage)."""

    value: float


@dataclass
class Vector(Metric):
    """A counter per position, as a list (vLLM's type for vllm:spec_decode_num_accepted_tokens_per_pos):
    `values[i]` is the proposals accepted at position i, one value for each of the k positions."""

    values: list[int]


@dataclass
class Histogram(Metric):
    """Observations by bucket: `buckets` maps each upper bound (the `le` label, "+Inf" included) to the count
    at or below it; `count` is the +Inf bucket's, `sum` the observed values'."""

    count: int
    sum: float
    buckets: dict[str, int]


def engine_metrics(model_name: str, speculative: SpeculativeConfig | None, engine: LLMEngine | None) -> list[Metric]:
    """The engine's gauges and counters now, labelled with `model_name` (none without an engine). The
    server's per-request histograms and counters (latencies, vllm:prompt_tokens, vllm:request_success) are
    observed by the server as responses go out, so they are not here."""
    collector = EngineCollector(model_name, engine.stats if engine is not None else lambda: None, speculative)
    return read_metrics(collector.collect())


def read_metrics(families: Iterable[MetricFamily]) -> list[Metric]:
    """Each gauge, counter and histogram series of `families` in vLLM's reader's shapes; the per-position
    acceptance counter as one Vector per label set. Other types (summary, info, untyped) have no such shape
    and are left out, as vLLM's reader leaves them."""
    metrics: list[Metric] = []
    for family in families:
        if family.type == "gauge":
            metrics += [Gauge(family.name, s.labels, float(s.value)) for s in _samples(family, "")]
        elif family.type == "counter" and family.name == PER_POSITION:
            metrics += _vectors(family)
        elif family.type == "counter":
            metrics += [Counter(family.name, s.labels, _count(s.value)) for s in _samples(family, "_total")]
        elif family.type == "histogram":
            metrics += _histograms(family)
    return metrics


def _samples(family: MetricFamily, suffix: str) -> list[Sample]:
    """The family's samples of one kind (a counter's `_total`, not its `_created`; a histogram's `_bucket`)."""
    return [s for s in family.samples if s.name == family.name + suffix]


def _count(value: float) -> int | float:
    """A counter's value as vLLM's reader gives it, an int, unless it has a fraction (seconds)."""
    return int(value) if float(value).is_integer() else value


def _key(labels: dict[str, str], leave_out: str = "") -> tuple[tuple[str, str], ...]:
    """`labels` (less `leave_out`, the label that tells a series' samples apart) as a key of the series."""
    return tuple(sorted((k, v) for k, v in labels.items() if k != leave_out))


def _vectors(family: MetricFamily) -> list[Metric]:
    """One Vector per label set (the `position` label aside), its values in position order, a missing
    position 0."""
    by_labels: dict[tuple, dict[int, int]] = {}
    for s in _samples(family, "_total"):
        by_labels.setdefault(_key(s.labels, "position"), {})[int(s.labels["position"])] = int(s.value)
    num_positions = 1 + max((p for values in by_labels.values() for p in values), default=-1)
    return [
        Vector(family.name, dict(key), [values.get(p, 0) for p in range(num_positions)])
        for key, values in by_labels.items()
    ]


def _histograms(family: MetricFamily) -> list[Metric]:
    """One Histogram per label set (the `le` label aside)."""
    buckets: dict[tuple, dict[str, int]] = {}
    for s in _samples(family, "_bucket"):
        buckets.setdefault(_key(s.labels, "le"), {})[s.labels["le"]] = int(s.value)
    counts = {_key(s.labels): int(s.value) for s in _samples(family, "_count")}
    sums = {_key(s.labels): s.value for s in _samples(family, "_sum")}
    return [Histogram(family.name, dict(key), counts[key], sums[key], per_le) for key, per_le in buckets.items()]
