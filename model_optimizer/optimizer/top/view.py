"""What one refresh of `mopt top` shows, computed from two scrapes (and NVML when the GPU is local)."""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass, field

import httpx

from model_optimizer.common.text import clip
from model_optimizer.optimizer.top.metrics import Scrape, delta, quantile, window_buckets

LATENCIES = {
    "ttft": ("vllm:time_to_first_token_seconds",),
    "tpot": ("vllm:request_time_per_output_token_seconds", "vllm:time_per_output_token_seconds"),
    "itl": ("vllm:inter_token_latency_seconds",),
    "e2e": ("vllm:e2e_request_latency_seconds",),
    "queue": ("vllm:request_queue_time_seconds",),
}
"""Each latency's histograms, the first one a server exports read. TPOT: each request's mean time per output
token, as vLLM 0.14 and mopt serve export it; older servers only had the old name (vLLM hid it from 0.12)."""

KV_CACHE_USAGE = ("vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc")
PREFIX_CACHE = (
    ("vllm:prefix_cache_hits_total", "vllm:prefix_cache_queries_total"),
    ("vllm:gpu_prefix_cache_hits_total", "vllm:gpu_prefix_cache_queries_total"),
)
"""The KV-cache usage gauge and the prefix-cache (hits, queries) counters, each the first a server exports:
vLLM before 0.10 had only the gpu_ names (renamed in vLLM PR #18354), which showed as no value."""

ENGINE_METRICS = (
    "vllm:num_requests_running",
    "vllm:num_requests_waiting",
    "vllm:kv_cache_usage_perc",
    "vllm:request_success_total",
    "vllm:prompt_tokens_total",
    "vllm:generation_tokens_total",
)
"""The engine metrics every mopt and vLLM server exports; a /metrics with none of them is some other exporter."""

STATES = ("ok", "unreachable", "http_error", "not_metrics", "no_engine_metrics")
"""ok: engine metrics read. unreachable: no answer at all. http_error: an answer other than 200.
not_metrics: a 200 that is no Prometheus text. no_engine_metrics: Prometheus text without the engine's."""


@dataclass
class View:
    url: str
    state: str = "ok"
    """One of STATES: only "ok" carries numbers."""
    error: str | None = None
    """What was wrong, and what to do about it, when the state is not "ok"."""
    models: list[str] = field(default_factory=list)
    window_s: float | None = None
    """Seconds between the two scrapes the rates and percentiles come from (None: first scrape)."""
    running: float | None = None
    waiting: float | None = None
    kv_cache_usage: float | None = None
    """Mean over engines and models, not the sum (two data-parallel engines at 0.7 and 0.6 read 130%): with
    caches of one size, as data parallelism gives, the share of all KV blocks in use."""
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
    """ttft / tpot / itl / e2e / queue -> {"p50", "p99", "mean" (seconds), "window" (True: since the last
    scrape)}. The percentiles are interpolated inside a bucket (as Prometheus' histogram_quantile), so they
    can be far from every observation when the buckets are coarse (vLLM's first E2E and queue bucket ends at
    0.3 s: requests all faster than that read a p50 of 150 ms); the mean, from _sum and _count, is exact."""
    errors_by_status: dict[str, float] = field(default_factory=dict)
    """HTTP responses with status >= 400 (or vLLM's "4xx"/"5xx") since the server started."""
    gpus: list[dict] = field(default_factory=list)
    num_malformed_samples: int = 0
    """Samples of this scrape that were skipped as malformed (a `_bucket` without `le`, a line that is no sample)."""
    taken_at: float = field(default_factory=time.time)

    @property
    def ok(self) -> bool:
        return self.state == "ok"

    @property
    def reachable(self) -> bool:
        """Whether the server answered at all (an answer can still be an error or no engine's)."""
        return self.state != "unreachable"

    def to_json(self) -> dict:
        return {**asdict(self), "reachable": self.reachable}


def build_view(url: str, cur: Scrape, prev: Scrape | None, gpus: list[dict]) -> View:
    window = cur.time - prev.time if prev is not None else None

    def rate(name: str) -> float | None:
        d = delta(cur, prev, name)
        return d / window if d is not None and window else None

    view = View(
        url=url,
        window_s=window,
        gpus=gpus,
        models=cur.labels("vllm:num_requests_running", "model_name"),
        running=cur.total("vllm:num_requests_running"),
        waiting=cur.total("vllm:num_requests_waiting"),
        kv_cache_usage=cur.mean(_first(cur, KV_CACHE_USAGE)),  # a fraction per engine: their mean, not sum
        requests_finished=delta(cur, prev, "vllm:request_success_total"),
        request_rate=rate("vllm:request_success_total"),
        prompt_tokens_per_s=rate("vllm:prompt_tokens_total"),
        generation_tokens_per_s=rate("vllm:generation_tokens_total"),
        preemptions=cur.total("vllm:num_preemptions_total"),
        preemptions_in_window=delta(cur, prev, "vllm:num_preemptions_total"),
        num_malformed_samples=cur.num_malformed,
    )
    hits_name, queries_name = next((pair for pair in PREFIX_CACHE if pair[1] in cur.samples), PREFIX_CACHE[0])
    hits, queries = delta(cur, prev, hits_name), delta(cur, prev, queries_name)
    if not queries:
        hits, queries = cur.total(hits_name), cur.total(queries_name)
    view.prefix_hit_rate = hits / queries if hits is not None and queries else None
    for key, names in LATENCIES.items():
        histogram = next((name for name in names if name + "_bucket" in cur.samples), names[0])
        buckets, in_window = window_buckets(cur, prev, histogram)
        if buckets:
            p50, p99 = quantile(0.5, buckets), quantile(0.99, buckets)
            mean = _mean(cur, prev if in_window else None, histogram)
            view.latency[key] = {"p50": p50, "p99": p99, "mean": mean, "window": in_window}
    for status, count in cur.by_label("http_requests_total", "status").items():
        if status[:1] in ("4", "5") and count > 0:  # "" (no status label) is in "45"
            view.errors_by_status[status] = count
    return view


def _mean(cur: Scrape, prev: Scrape | None, histogram: str) -> float | None:
    """The histogram's mean over the window (`prev` given) or all time: its _sum over its _count."""
    if prev is None:
        total, count = cur.total(histogram + "_sum"), cur.total(histogram + "_count")
    else:
        total, count = delta(cur, prev, histogram + "_sum"), delta(cur, prev, histogram + "_count")
    return total / count if total is not None and count else None


def _first(scrape: Scrape, names: tuple[str, ...]) -> str:
    """The first of `names` the scrape holds, else the first: one metric under its current or former name."""
    return next((name for name in names if name in scrape.samples), names[0])


def is_local(url: str) -> bool:
    """Whether `url` points at this machine, whose GPUs NVML can read (a remote server's it cannot)."""
    import socket

    host = (httpx.URL(url).host or "").lower()
    return host in {"localhost", "127.0.0.1", "::1", "0.0.0.0", socket.gethostname().lower()}  # noqa: S104


ERROR_CHARS = 160
"""Most characters of a scrape's error the dashboard shows."""


def base_url(url: str) -> str:
    """The server's base URL from what users paste: the OpenAI base URL (.../v1) or the /metrics URL itself."""
    url = url.rstrip("/")
    for suffix in ("/v1", "/metrics"):
        if url.endswith(suffix):
            return url[: -len(suffix)]
    return url


def http_error(response: httpx.Response, sent_key: bool) -> str:
    """What an answer other than 200 means, with what to do about it."""
    status = f"/metrics answered {response.status_code} {response.reason_phrase}".rstrip()
    if response.status_code in (401, 403):
        if sent_key:
            return f"{status}: the server refused the API key (--api-key / MOPT_API_KEY)"
        return f"{status}: the server wants an API key: pass --api-key or set MOPT_API_KEY"
    if response.status_code == 404:
        return f"{status}: is this the server's port? --url takes its base URL, e.g. http://host:8000"
    return status


def no_engine_metrics(scrape: Scrape) -> str:
    """Why a Prometheus page is not an engine's, naming what was looked for and what was found."""
    found = sorted(scrape.samples)
    what = f"{len(found)} other metrics, e.g. {', '.join(found[:3])}" if found else "no metrics at all"
    return f"/metrics serves no mopt/vLLM engine metrics (looked for {', '.join(ENGINE_METRICS)}; found {what})"


class Monitor:
    """Polls one server's /metrics; each poll gives a View, one whose state says what went wrong when the
    scrape gave no engine metrics."""

    def __init__(self, url: str, api_key: str | None = None, timeout: float = 5.0, gpu: bool = True) -> None:
        self.url = base_url(url)
        self.headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self.timeout = timeout
        self.gpu = gpu and is_local(self.url)
        self.previous: Scrape | None = None

    def poll(self) -> View:
        try:
            response = httpx.get(
                f"{self.url}/metrics", headers=self.headers, timeout=self.timeout, follow_redirects=True
            )
        except httpx.TooManyRedirects as exc:
            return self._failed("http_error", f"/metrics redirects too many times: {exc}")
        except httpx.HTTPError as exc:  # refused, timed out, no such host: nothing answered
            return self._failed("unreachable", str(exc) or type(exc).__name__)
        if response.status_code != 200:
            return self._failed("http_error", http_error(response, bool(self.headers)), response)
        try:
            scrape = Scrape.parse(response.text, time.monotonic())
        except ValueError as exc:  # the parser quotes the whole offending line: an HTML page, say
            message = f"/metrics is not Prometheus text: {clip(str(exc), ERROR_CHARS)}"
            return self._failed("not_metrics", message, response)
        if not any(name in scrape.samples for name in ENGINE_METRICS):
            return self._failed("no_engine_metrics", no_engine_metrics(scrape), response)
        from model_optimizer.optimizer.top.gpu import read_gpus

        view = build_view(self.url, scrape, self.previous, read_gpus() if self.gpu else [])
        self.previous = scrape
        return view

    def _failed(self, state: str, error: str, response: httpx.Response | None = None) -> View:
        self.previous = None  # a restarted server's counters start again: no delta across the gap
        if response is not None and response.history:  # followed: say where the answer came from
            error += f" (redirected to {response.url})"
        # a server's text (a reason phrase, a quoted line) may hold terminal escapes: shown, not obeyed
        return View(url=self.url, state=state, error="".join(c if c.isprintable() else "?" for c in error))
