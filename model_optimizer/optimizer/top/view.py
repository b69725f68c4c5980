"""What one refresh of `mopt top` shows, computed from two scrapes (and NVML when the GPU is local)."""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass, field

import httpx

from model_optimizer.common.text import clip
from model_optimizer.optimizer.top.metrics import Scrape, delta, quantile, window_buckets

LATENCIES = {
    "ttft": "vllm:time_to_first_token_seconds",
    "tpot": "vllm:time_per_output_token_seconds",
    "itl": "vllm:inter_token_latency_seconds",
    "e2e": "vllm:e2e_request_latency_seconds",
    "queue": "vllm:request_queue_time_seconds",
}


@dataclass
class View:
    url: str
    reachable: bool
    error: str | None = None
    models: list[str] = field(default_factory=list)
    window_s: float | None = None
    """Seconds between the two scrapes the rates and percentiles come from (None: first scrape)."""
    running: float | None = None
    waiting: float | None = None
    kv_cache_usage: float | None = None
    requests_finished: float | None = None
    """Requests finished in the window."""
    request_rate: float | None = None
    prompt_tokens_per_s: float | None = None
    generation_tokens_per_s: float | None = None
    prefix_hit_rate: float | None = None
    """Prompt tokens found in the prefix cache / looked up, in the window (all time on the first scrape)."""
    preemptions: float | None = None
    preemptions_in_window: float | None = None
    latency: dict[str, dict] = field(default_factory=dict)
    """ttft / tpot / itl / e2e / queue -> {"p50", "p99" (seconds), "window" (True: since the last scrape)}."""
    errors_by_status: dict[str, float] = field(default_factory=dict)
    """HTTP responses with status >= 400 (or vLLM's "4xx"/"5xx") since the server started."""
    gpus: list[dict] = field(default_factory=list)
    taken_at: float = field(default_factory=time.time)

    def to_json(self) -> dict:
        return asdict(self)


def build_view(url: str, cur: Scrape, prev: Scrape | None, gpus: list[dict]) -> View:
    window = cur.time - prev.time if prev is not None else None

    def rate(name: str) -> float | None:
        d = delta(cur, prev, name)
        return d / window if d is not None and window else None

    view = View(
        url=url,
        reachable=True,
        window_s=window,
        gpus=gpus,
        models=cur.labels("vllm:num_requests_running", "model_name"),
        running=cur.total("vllm:num_requests_running"),
        waiting=cur.total("vllm:num_requests_waiting"),
        kv_cache_usage=cur.total("vllm:kv_cache_usage_perc"),
        requests_finished=delta(cur, prev, "vllm:request_success_total"),
        request_rate=rate("vllm:request_success_total"),
        prompt_tokens_per_s=rate("vllm:prompt_tokens_total"),
        generation_tokens_per_s=rate("vllm:generation_tokens_total"),
        preemptions=cur.total("vllm:num_preemptions_total"),
        preemptions_in_window=delta(cur, prev, "vllm:num_preemptions_total"),
    )
    hits, queries = (
        delta(cur, prev, "vllm:prefix_cache_hits_total"),
        delta(cur, prev, "vllm:prefix_cache_queries_total"),
    )
    if not queries:
        hits, queries = cur.total("vllm:prefix_cache_hits_total"), cur.total("vllm:prefix_cache_queries_total")
    view.prefix_hit_rate = hits / queries if hits is not None and queries else None
    for key, histogram in LATENCIES.items():
        buckets, in_window = window_buckets(cur, prev, histogram)
        if buckets:
            view.latency[key] = {"p50": quantile(0.5, buckets), "p99": quantile(0.99, buckets), "window": in_window}
    for status, count in cur.by_label("http_requests_total", "status").items():
        if status[:1] in "45" and count > 0:
            view.errors_by_status[status] = count
    return view


def is_local(url: str) -> bool:
    """Whether `url` points at this machine, whose GPUs NVML can read (a remote server's it cannot)."""
    import socket

    host = (httpx.URL(url).host or "").lower()
    return host in {"localhost", "127.0.0.1", "::1", "0.0.0.0", socket.gethostname().lower()}  # noqa: S104


ERROR_CHARS = 160
"""Most characters of a scrape's error the dashboard shows."""


class Monitor:
    """Polls one server's /metrics; each poll gives a View, an unreachable one when the scrape fails."""

    def __init__(self, url: str, api_key: str | None = None, timeout: float = 5.0, gpu: bool = True) -> None:
        self.url = url.rstrip("/")
        self.headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self.timeout = timeout
        self.gpu = gpu and is_local(self.url)
        self.previous: Scrape | None = None

    def poll(self) -> View:
        try:
            response = httpx.get(f"{self.url}/metrics", headers=self.headers, timeout=self.timeout)
            if response.status_code != 200:
                raise ValueError(f"/metrics answered {response.status_code}")
            try:
                scrape = Scrape.parse(response.text, time.monotonic())
            except ValueError as exc:  # the parser quotes the whole offending line: an HTML page, say
                raise ValueError(f"/metrics is not Prometheus text: {clip(str(exc), ERROR_CHARS)}") from None
        except (httpx.HTTPError, ValueError) as exc:
            self.previous = None  # a restarted server's counters start again: no delta across the gap
            return View(url=self.url, reachable=False, error=str(exc) or type(exc).__name__)
        from model_optimizer.optimizer.top.gpu import read_gpus

        view = build_view(self.url, scrape, self.previous, read_gpus() if self.gpu else [])
        self.previous = scrape
        return view
