"""Read the server's Prometheus /metrics before, during and after a run.

Names are matched by their ending, so `vllm:kv_cache_usage_perc` and `mopt:kv_cache_usage_perc`
both count; label sets are summed. A server without /metrics gives `available: false`.

The page is parsed in a worker thread: the Prometheus parser is pure Python and takes about 16 ms
on a vLLM-sized page, which on the event loop would delay every chunk timestamp of the run by as much.
"""

from __future__ import annotations

import asyncio
import math

import httpx
from prometheus_client.parser import text_string_to_metric_families

from model_optimizer.optimizer.bench.overhead import cancel_task

COUNTERS = (
    "num_preemptions_total",
    "prefix_cache_hits_total",
    "prefix_cache_queries_total",
    "prompt_tokens_total",
    "generation_tokens_total",
    "request_success_total",
    "spec_decode_num_drafts_total",
    "spec_decode_num_draft_tokens_total",
    "spec_decode_num_accepted_tokens_total",
)
GAUGES = ("kv_cache_usage_perc", "gpu_cache_usage_perc", "num_requests_running", "num_requests_waiting")


def parse_metrics(text: str) -> dict[str, float]:
    """Prometheus text -> {sample name: value summed over label sets}."""
    values: dict[str, float] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if math.isfinite(sample.value):
                values[sample.name] = values.get(sample.name, 0.0) + sample.value
    return values


def pick(values: dict[str, float], suffix: str) -> float | None:
    """The value whose name is `suffix` or ends with `:suffix` (any namespace prefix), if any."""
    for name, value in values.items():
        if name == suffix or name.endswith(":" + suffix):
            return value
    return None


class MetricsScraper:
    """Scrape `base_url/metrics` at the start, every `interval` seconds, and at the end."""

    def __init__(self, base_url: str, interval: float, headers: dict[str, str] | None = None) -> None:
        self.url = base_url + "/metrics"
        self.interval = interval
        self.http = httpx.AsyncClient(timeout=5.0, headers=headers)
        self.samples: list[dict[str, float]] = []
        self.error: str | None = None
        self._task: asyncio.Task | None = None

    async def scrape(self) -> dict[str, float] | None:
        try:
            resp = await self.http.get(self.url)
            if resp.status_code != 200:
                self.error = f"GET /metrics returned HTTP {resp.status_code}"
                return None
            values = await asyncio.to_thread(parse_metrics, resp.text)
        except httpx.HTTPError as exc:
            self.error = f"GET /metrics failed: {exc!r}"
            return None
        except ValueError as exc:  # the parser's complaint about malformed exposition text
            self.error = f"/metrics is not Prometheus text: {exc}"
            return None
        self.samples.append(values)
        return values

    async def start(self) -> None:
        await self.scrape()
        if self.interval > 0 and self.samples:
            self._task = asyncio.create_task(self._loop())

    async def _loop(self) -> None:
        while True:
            await asyncio.sleep(self.interval)
            await self.scrape()

    async def stop(self) -> dict:
        """Stop sampling, take the last scrape and summarize counters and gauges."""
        await cancel_task(self._task)
        if self.samples:
            await self.scrape()
        await self.http.aclose()
        return summarize_scrapes(self.samples, self.error)


def summarize_scrapes(samples: list[dict[str, float]], error: str | None = None) -> dict:
    """Counter deltas, gauge before/after/max, and derived prefix-cache hit rate."""
    if len(samples) < 2:
        return {"available": False, "reason": error or "no /metrics samples"}
    first, last = samples[0], samples[-1]
    counters = {}
    for suffix in COUNTERS:
        before, after = pick(first, suffix), pick(last, suffix)
        if before is not None and after is not None:
            counters[suffix] = {"before": before, "after": after, "delta": after - before}
    gauges = {}
    for suffix in GAUGES:
        seen = [v for v in (pick(s, suffix) for s in samples) if v is not None]
        if seen:
            gauges[suffix] = {"before": seen[0], "after": seen[-1], "max": max(seen)}
    out: dict = {"available": True, "num_scrapes": len(samples), "counters": counters, "gauges": gauges}
    hits, queries = counters.get("prefix_cache_hits_total"), counters.get("prefix_cache_queries_total")
    if hits and queries and queries["delta"] > 0:
        out["prefix_cache_hit_rate"] = hits["delta"] / queries["delta"]
    if "num_preemptions_total" in counters:
        out["preemptions"] = counters["num_preemptions_total"]["delta"]
    kv = gauges.get("kv_cache_usage_perc") or gauges.get("gpu_cache_usage_perc")
    if kv:
        out["kv_cache_usage_max"] = kv["max"]
    out.update(spec_decode_summary(counters))
    return out


def spec_decode_summary(counters: dict) -> dict:
    """Speculative decoding over the run, when the server exports vLLM's spec_decode counters and some request
    verified proposals: mean acceptance length (tokens per verifying request-step, its own token included) and
    acceptance rate (accepted proposals over proposals)."""
    drafts = counters.get("spec_decode_num_drafts_total", {}).get("delta")
    proposed = counters.get("spec_decode_num_draft_tokens_total", {}).get("delta")
    accepted = counters.get("spec_decode_num_accepted_tokens_total", {}).get("delta")
    if not drafts or accepted is None:
        return {}
    out = {"spec_decode_mean_acceptance_length": 1 + accepted / drafts}
    if proposed:
        out["spec_decode_acceptance_rate"] = accepted / proposed
    return out
