"""Turn request records into the figures users compare: latency percentiles, throughput, goodput.

Definitions (all latencies over successful requests; failures stay in every count and rate):
  TTFT  first token-carrying chunk minus send time
  TPOT  (E2E - TTFT) / (output_tokens - 1), for requests with more than one output token
  ITL   gaps between consecutive token-carrying chunks, pooled over all requests; a chunk carrying k
        tokens (a server merges what a slow reader left waiting) counts as k gaps of gap/k
  E2E   end minus send time
  duration  first send to last end; rates are counts divided by it
  goodput   requests meeting every SLO threshold, per second; failed requests never meet it
  slo_checks  each threshold's statistic over all requests, failed ones counting as infinitely slow
  error_examples  the message of the first failed request of each error kind
  output_tokens_from  successful generations per source of their output token count (token_counts.py)
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from model_optimizer.optimizer.bench.record import RequestRecord
from model_optimizer.optimizer.bench.token_counts import count_sources

STATS = ("mean", "p50", "p90", "p95", "p99", "max")
LATENCIES = ("ttft", "tpot", "itl", "e2e")
_UNITS = {"ms": 1e-3, "s": 1.0, "us": 1e-6}


def distribution(values: list[float] | np.ndarray, scale: float = 1e3) -> dict[str, float | None]:
    """mean, p50, p90, p95, p99 and max of `values` times `scale` (seconds -> ms by default)."""
    arr = np.asarray(values, dtype=np.float64) * scale
    if arr.size == 0:
        return {s: None for s in STATS} | {"count": 0}
    out = {"mean": float(arr.mean())}
    for q in (50, 90, 95, 99):
        out[f"p{q}"] = float(np.percentile(arr, q))
    return out | {"max": float(arr.max()), "count": int(arr.size)}


def tpot(rec: RequestRecord) -> float | None:
    """Time per output token after the first, or None when it is undefined."""
    if not rec.ok or rec.ttft is None or rec.output_tokens < 2:
        return None
    return (rec.e2e - rec.ttft) / (rec.output_tokens - 1)


def itls(rec: RequestRecord) -> list[float]:
    """Inter-token gaps of one request: each chunk after the first splits its gap from the previous
    token-carrying chunk evenly over its tokens (tokens that came with the first one are not timed)."""
    t = rec.chunk_times
    if not rec.chunk_tokens:  # one token per chunk
        return [b - a for a, b in zip(t, t[1:])]
    gaps: list[float] = []
    last = t[0] if t else 0.0
    for arrived, num_tokens in zip(t[1:], rec.chunk_tokens[1:]):
        if num_tokens > 0:
            gaps += [(arrived - last) / num_tokens] * num_tokens
            last = arrived
    return gaps


@dataclass(frozen=True)
class SloThreshold:
    """One `metric_stat=value` term of --slo; `limit` in seconds."""

    metric: str
    stat: str
    limit: float

    @property
    def key(self) -> str:
        return f"{self.metric}_{self.stat}"


def parse_slo(spec: str | None) -> list[SloThreshold]:
    """Parse `ttft_p99=200ms,tpot_p99=30ms` (units ms, s or us; a bare number is ms)."""
    if not spec:
        return []
    terms = []
    pattern = re.compile(r"^(ttft|tpot|itl|e2e)(?:_(mean|p50|p90|p95|p99|max))?=([0-9.]+)(ms|s|us)?$")
    for term in spec.split(","):
        match = pattern.match(term.strip())
        if not match:
            raise ValueError(
                f"slo term {term.strip()!r} must look like ttft_p99=200ms: metric ttft|tpot|itl|e2e, "
                "optional _mean|_p50|_p90|_p95|_p99|_max, a number, unit ms|s|us"
            )
        metric, stat, number, unit = match.groups()
        terms.append(SloThreshold(metric, stat or "p99", float(number) * _UNITS[unit or "ms"]))
    return terms


def request_value(rec: RequestRecord, slo: SloThreshold) -> float | None:
    """The figure of one request that `slo` constrains (its own ITL statistic for itl)."""
    if slo.metric == "ttft":
        return rec.ttft
    if slo.metric == "tpot":
        return tpot(rec)
    if slo.metric == "e2e":
        return rec.e2e
    gaps = itls(rec)
    return distribution(gaps, 1.0)[slo.stat] if gaps else None


def meets_slos(rec: RequestRecord, slos: list[SloThreshold]) -> bool:
    """A successful request meets every threshold; undefined figures (TPOT of 1 token) do not count against it."""
    if not rec.ok:
        return False
    for slo in slos:
        value = request_value(rec, slo)
        if value is not None and value > slo.limit:
            return False
    return True


def summarize(records: list[RequestRecord], slos: list[SloThreshold] | None = None) -> dict:
    """All run-level figures of a list of records, as a JSON-ready dict."""
    ok = [r for r in records if r.ok]
    duration = (max(r.end for r in records) - min(r.send for r in records)) if records else 0.0
    per_s = (lambda x: x / duration) if duration > 0 else (lambda x: 0.0)
    out_tokens = sum(r.output_tokens for r in ok)
    in_tokens = sum(r.prompt_tokens if r.prompt_tokens is not None else r.prompt_len for r in ok)
    errors: dict[str, int] = {}
    error_examples: dict[str, str] = {}
    for r in records:
        if r.error:
            errors[r.error] = errors.get(r.error, 0) + 1
            error_examples.setdefault(r.error, r.error_detail)
    summary = {
        "num_requests": len(records),
        "num_ok": len(ok),
        "num_failed": len(records) - len(ok),
        "success_rate": len(ok) / len(records) if records else 0.0,
        "errors": errors,
        "error_examples": error_examples,
        "duration_s": duration,
        "request_rate": per_s(len(ok)),
        "attempted_rate": per_s(len(records)),
        "prompt_tokens": in_tokens,
        "output_tokens": out_tokens,
        "output_throughput": per_s(out_tokens),
        "total_throughput": per_s(in_tokens + out_tokens),
        "ttft_ms": distribution([r.ttft for r in ok if r.ttft is not None]),
        "tpot_ms": distribution([v for v in map(tpot, ok) if v is not None]),
        "itl_ms": distribution([gap for r in ok for gap in itls(r)]),
        "e2e_ms": distribution([r.e2e for r in ok]),
        "output_tokens_from": count_sources(records),
    }
    if slos:
        summary |= slo_summary(records, slos, per_s)
    return summary


def slo_summary(records: list[RequestRecord], slos: list[SloThreshold], per_s: Callable[[float], float]) -> dict:
    """Goodput, the share of requests meeting every threshold, and each run-level check."""
    good = sum(meets_slos(r, slos) for r in records)
    checks = {slo.key: slo_check(records, slo) for slo in slos}
    return {
        "goodput": per_s(good),
        "num_good": good,
        "slo_attainment": good / len(records) if records else 0.0,
        "slo_checks": checks,
        "slo_met": all(c["met"] for c in checks.values()),
    }


def slo_check(records: list[RequestRecord], slo: SloThreshold) -> dict:
    """One term checked on the run: its statistic over every request, a failed one counting as
    infinitely slow, so failures and slow answers share one budget (a p99 is met when at most 1 % of
    the requests failed or were over the limit). Requests whose figure is undefined (TPOT of one
    token) are left out, as goodput leaves them out.

    The percentile is the smallest value that the given share of requests is within (no
    interpolation, so it is met exactly when that share is); `measured_ms` is None when nothing was
    measured or when failed requests make it infinite (JSON has no infinity), and `share_over_limit`
    tells the two apart. A term no request has a figure for (every answer one token long, all of them
    successful) is met, marked `undefined`, as goodput counts those requests; with no request at all it
    is not."""
    values = [request_value(r, slo) if r.ok else math.inf for r in records]
    judged = sorted(v for v in values if v is not None)
    limit_ms = slo.limit * 1e3
    if not judged:
        empty = {"limit_ms": limit_ms, "measured_ms": None, "share_over_limit": None}
        return {**empty, "met": True, "undefined": True} if records else {**empty, "met": False}
    measured = _statistic(judged, slo.stat)
    share_over = sum(v > slo.limit for v in judged) / len(judged)
    return {
        "limit_ms": limit_ms,
        "measured_ms": measured * 1e3 if math.isfinite(measured) else None,
        "share_over_limit": share_over,
        "met": measured <= slo.limit,
    }


def _statistic(ordered: list[float], stat: str) -> float:
    """mean, max or pXX of ascending `ordered` values (pXX: the ceil(n * XX / 100)-th smallest)."""
    if stat == "mean":
        return math.fsum(ordered) / len(ordered)
    if stat == "max":
        return ordered[-1]
    rank = -(-len(ordered) * int(stat[1:]) // 100)  # ceiling in integers: 0.99 * 200 is not exactly 198
    return ordered[rank - 1]
