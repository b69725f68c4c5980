"""Prometheus metrics named as vLLM's (`vllm:`), so existing Grafana dashboards work, plus `mopt:` extras.

Each app has its own CollectorRegistry (tests run several apps in one process). With several
frontend processes (--api-server-count) prometheus_client runs in its multiprocess mode (values in
files of one folder, frontends.py) and /metrics sums them, whichever frontend answers. Engine gauges and
counters are read from the AsyncEngine's stats snapshot at scrape time; latency histograms and the
finished-request counter are observed by the server as outputs arrive (an embedding model's, which has no
engine, by its route: each input a finished request, as vLLM counts pooling requests). Names, types and the
`model_name` label follow vLLM's v1 logger (tests/runtime/server/test_metrics_names.py holds the list);
vLLM's second label, `engine`, is left out: one server runs one engine. `http_requests_total`
(handler, method, status) is the counter vLLM's HTTP instrumentation exports, with exact status codes.
"""

from __future__ import annotations

import math
import os
import time
from bisect import bisect_left
from collections.abc import Callable, Iterator
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily
from prometheus_client.registry import Collector
from prometheus_client.samples import Sample
from prometheus_client.utils import floatToGoString
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from model_optimizer.runtime.engine.engine import EngineStats
from model_optimizer.runtime.engine.outputs import RequestOutput
from model_optimizer.runtime.server.auth import route_path

TTFT_BUCKETS = (0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0, 40.0)
ITL_BUCKETS = (0.001, 0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5, 5.0, 10.0)
E2E_BUCKETS = (0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0, 60.0, 120.0, 240.0)
TPOT_BUCKETS = (0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0)
PHASE_BUCKETS = (0.01, 0.025, 0.05, 0.1, 0.25) + E2E_BUCKETS
"""Queue, prefill, decode and inference time: E2E's buckets plus finer ones for short phases."""
TOKEN_BUCKETS = tuple(m * 10**e for e in range(7) for m in (1, 2, 5))
"""Prompt and output lengths: 1, 2, 5, 10 ... 5,000,000 tokens."""
N_BUCKETS = (1, 2, 5, 10, 20)
HANDLERS = frozenset(
    {
        "/v1/completions",
        "/v1/chat/completions",
        "/v1/responses",
        "/v1/embeddings",
        "/v1/models",
        "/health",
        "/ready",
        "/version",
        "/metrics",
        "/tokenize",
        "/detokenize",
        "/pause",
        "/resume",
        "/is_paused",
    }
)
"""Paths counted under their own handler label; any other path is "other" (no label per random 404 path)."""


def _handler_label(path: str) -> str:
    """The `handler` label of a request path: the route's template, never the raw path."""
    if path in HANDLERS:
        return path
    if path.startswith("/v1/models/"):
        return "/v1/models/{id}"
    return "other"


class _EngineCollector(Collector):
    """Engine state from the latest stats snapshot (None while the model loads)."""

    def __init__(self, model_name: str, stats: Callable[[], EngineStats | None], speculative: bool = False) -> None:
        self.model_name = model_name
        self.stats = stats
        self.speculative = speculative
        """Export vLLM's spec_decode counters (as vLLM does, only when speculative decoding is configured)."""
        self.num_pooled_prompt_tokens: int | None = None
        """Tokens of the inputs an embedding model has embedded (None before the first): its vllm:prompt_tokens."""

    def collect(self) -> Iterator:
        s = self.stats()
        if s is None:  # no engine (yet): an embedding model's prompt tokens, once it has embedded any
            if self.num_pooled_prompt_tokens is not None:
                c = CounterMetricFamily("vllm:prompt_tokens", "Prompt tokens computed.", labels=["model_name"])
                c.add_metric([self.model_name], self.num_pooled_prompt_tokens)
                yield c
            return
        label = [self.model_name]

        def gauge(name: str, doc: str, value: float) -> GaugeMetricFamily:
            g = GaugeMetricFamily(name, doc, labels=["model_name"])
            g.add_metric(label, value)
            return g

        def counter(name: str, doc: str, value: float) -> CounterMetricFamily:
            c = CounterMetricFamily(name, doc, labels=["model_name"])
            c.add_metric(label, value)
            return c

        yield gauge("vllm:num_requests_running", "Sequences running in the engine.", s.num_running)
        yield gauge("vllm:num_requests_waiting", "Sequences waiting to run.", s.num_waiting)
        yield gauge("vllm:kv_cache_usage_perc", "KV-cache usage (1 means full).", s.kv_cache_usage)
        yield gauge(
            "vllm:gpu_cache_usage_perc",
            "KV-cache usage (1 means full); vLLM's older name, kept for dashboards that still read it.",
            s.kv_cache_usage,
        )
        yield gauge("mopt:kv_cache_free_blocks", "Free KV-cache blocks.", s.num_free_blocks)
        yield gauge("mopt:kv_cache_total_blocks", "All KV-cache blocks.", s.num_blocks)
        yield counter(
            "vllm:prefix_cache_queries", "Prompt tokens looked up in the prefix cache.", s.prefix_cache_queries
        )
        yield counter("vllm:prefix_cache_hits", "Prompt tokens found in the prefix cache.", s.prefix_cache_hits)
        yield counter("vllm:num_preemptions", "Preempted sequences.", s.num_preemptions)
        yield counter(
            "mopt:host_kv_hits", "Of the prefix-cache hits, prompt tokens loaded from the host KV tier.", s.host_kv_hits
        )
        yield counter(
            "mopt:swapped_out_blocks", "KV blocks copied to host memory by swap preemptions.", s.num_swapped_out_blocks
        )
        yield counter(
            "mopt:swapped_in_blocks",
            "KV blocks copied back when swapped-out requests resumed.",
            s.num_swapped_in_blocks,
        )
        yield counter("vllm:prompt_tokens", "Prompt tokens computed.", s.num_prompt_tokens)
        yield counter("vllm:generation_tokens", "Tokens generated.", s.num_generation_tokens)
        yield counter("mopt:engine_steps", "Engine steps run.", s.num_steps)
        yield counter(
            "mopt:grammar_steps", "Engine steps that sampled with grammar masks (structured outputs).", s.grammar_steps
        )
        yield counter(
            "mopt:grammar_host_seconds",
            "Host time advancing grammars and filling their token masks (while the forward runs).",
            s.grammar_seconds,
        )
        yield counter(
            "mopt:grammar_wait_seconds",
            "Of that, the time the step loop waited for masks (the part the forward did not hide).",
            s.grammar_wait_seconds,
        )
        yield gauge(
            "mopt:grammar_host_seconds_max",
            "The longest host time one step spent on grammar masks.",
            s.grammar_max_seconds,
        )
        if self.speculative:
            yield from self._spec_decode(s, counter)

    def _spec_decode(self, s: EngineStats, counter: Callable) -> Iterator:
        yield counter("vllm:spec_decode_num_drafts", "Request-steps that verified proposals.", s.spec_num_drafts)
        yield counter("vllm:spec_decode_num_draft_tokens", "Proposed tokens verified.", s.spec_num_draft_tokens)
        yield counter("vllm:spec_decode_num_accepted_tokens", "Proposed tokens accepted.", s.spec_num_accepted_tokens)
        per_pos = CounterMetricFamily(
            "vllm:spec_decode_num_accepted_tokens_per_pos",
            "Accepted proposed tokens by position in the proposal.",
            labels=["model_name", "position"],
        )
        for position, value in enumerate(s.spec_accepted_per_pos):
            per_pos.add_metric([self.model_name, str(position)], value)
        yield per_pos


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


class _PerTokenHistogram:
    """TokenHistogram's interface over a prometheus_client Histogram, for the multiprocess mode (where
    only prometheus_client's own metrics are summed over processes)."""

    def __init__(self, histogram: Any) -> None:
        self.histogram = histogram

    def observe(self, value: float, count: int = 1) -> None:
        for _ in range(count):
            self.histogram.observe(value)


def multiprocess() -> bool:
    """Whether prometheus_client keeps its values in the shared folder of several frontends."""
    return bool(os.environ.get("PROMETHEUS_MULTIPROC_DIR"))


class ServerMetrics:
    def __init__(self, model_name: str, stats: Callable[[], EngineStats | None], speculative: bool = False) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        self.model_name = model_name
        self.engine_collector = _EngineCollector(model_name, stats, speculative)
        self.registry.register(self.engine_collector)
        labels = ["model_name"]
        self.ttft = Histogram(
            "vllm:time_to_first_token_seconds",
            "Time to first token.",
            labels,
            buckets=TTFT_BUCKETS,
            registry=self.registry,
        ).labels(model_name)
        if multiprocess():
            self.itl: Any = _PerTokenHistogram(
                Histogram(
                    "vllm:inter_token_latency_seconds",
                    "Time between output tokens.",
                    labels,
                    buckets=ITL_BUCKETS,
                    registry=self.registry,
                ).labels(model_name)
            )
        else:
            self.itl = TokenHistogram(
                "vllm:inter_token_latency_seconds",
                "Time between output tokens.",
                model_name,
                ITL_BUCKETS,
                self.registry,
            )
        self.e2e = Histogram(
            "vllm:e2e_request_latency_seconds",
            "Request latency from arrival to finish.",
            labels,
            buckets=E2E_BUCKETS,
            registry=self.registry,
        ).labels(model_name)
        self.success = Counter(
            "vllm:request_success",
            "Finished sequences by finish reason.",
            ["model_name", "finished_reason"],
            registry=self.registry,
        )

        def histogram(name: str, doc: str, buckets: tuple) -> Histogram:
            return Histogram(name, doc, labels, buckets=buckets, registry=self.registry).labels(model_name)

        self.tpot = histogram(
            "vllm:time_per_output_token_seconds",
            "Mean time per output token after the first, per request.",
            TPOT_BUCKETS,
        )
        self.queue_time = histogram(
            "vllm:request_queue_time_seconds", "Time from arrival to first schedule.", PHASE_BUCKETS
        )
        self.prefill_time = histogram(
            "vllm:request_prefill_time_seconds", "Time from first schedule to first token.", PHASE_BUCKETS
        )
        self.decode_time = histogram(
            "vllm:request_decode_time_seconds", "Time from first token to finish.", PHASE_BUCKETS
        )
        self.inference_time = histogram(
            "vllm:request_inference_time_seconds", "Time from first schedule to finish.", PHASE_BUCKETS
        )
        self.prompt_len = histogram("vllm:request_prompt_tokens", "Prompt tokens per finished request.", TOKEN_BUCKETS)
        self.output_len = histogram(
            "vllm:request_generation_tokens", "Output tokens per finished request.", TOKEN_BUCKETS
        )
        self.params_n = histogram("vllm:request_params_n", "Completions (n) per finished request.", N_BUCKETS)
        self.http_requests = Counter(
            "http_requests",
            "HTTP requests by handler, method and status code.",
            ["handler", "method", "status"],
            registry=self.registry,
        )

    def render(self) -> bytes:
        if not multiprocess():
            return generate_latest(self.registry)
        from prometheus_client import multiprocess as mp

        registry = CollectorRegistry()
        mp.MultiProcessCollector(registry)  # every frontend's counters and histograms, summed
        registry.register(self.engine_collector)  # the core's state, the same in every frontend
        return generate_latest(registry)

    def embeddings_finished(self, num_prompt_tokens: list[int], seconds: float) -> None:
        """An embedding request answered: each input counts as one request finished with reason "stop", as
        vLLM counts a pooling request's prompts (its scheduler finishes a pooling request with
        FINISHED_STOPPED as soon as the pooler has output), with its tokens and the request's latency."""
        for num_tokens in num_prompt_tokens:
            self.e2e.observe(seconds)
            self.prompt_len.observe(num_tokens)
        self.success.labels(self.model_name, "stop").inc(len(num_prompt_tokens))
        collector = self.engine_collector
        collector.num_pooled_prompt_tokens = (collector.num_pooled_prompt_tokens or 0) + sum(num_prompt_tokens)

    def embeddings_aborted(self, num_inputs: int, seconds: float) -> None:
        """An embedding request stopped before its end (client gone, drain timed out): each input counts as
        one request finished with reason "abort"."""
        for _ in range(num_inputs):
            self.e2e.observe(seconds)
        self.success.labels(self.model_name, "abort").inc(num_inputs)

    def tracker(self, num_completions: int) -> RequestTracker:
        return RequestTracker(self, num_completions)


class RequestTracker:
    """Observes one engine request's outputs as they reach the server.

    The server asks for DELTA outputs (streams) or one FINAL_ONLY output, so every output's tokens
    are new. Inter-token latency is per completion: each token after a completion's first one, timed
    from the previous output (or, for tokens that arrive together with the first, from the first
    token's time, their mean over the decode: count and sum as if observed one by one).
    """

    def __init__(self, metrics: ServerMetrics, num_completions: int) -> None:
        self.metrics = metrics
        self.num_completions = num_completions
        self.num_tokens = 0
        self.last_time: float | None = None
        self.started: set[int] = set()
        """Indices of the completions whose first token has arrived."""
        self.finish_reasons: dict[int, str] = {}
        """Completion index -> its finish_reason, as the deltas report them."""

    def observe(self, output: RequestOutput) -> int:
        """Observe one output (called for every chunk: kept cheap); returns its number of tokens."""
        now = time.time()
        first_token = output.metrics.first_token_time or now
        since = self.last_time if self.last_time is not None else first_token
        new = 0
        for completion in output.outputs:
            num_later = len(completion.token_ids)
            new += num_later
            if num_later and completion.index not in self.started:
                self.started.add(completion.index)
                num_later -= 1
            if num_later:
                self.metrics.itl.observe(max(now - since, 0.0) / num_later, num_later)
            if completion.finish_reason is not None:
                self.finish_reasons[completion.index] = completion.finish_reason
        if new > 0:
            if self.last_time is None:
                self.metrics.ttft.observe(max(first_token - output.metrics.arrival_time, 0.0))
            self.num_tokens += new
            self.last_time = now
        if output.finished:
            self._finished(output, now)
        return new

    def _finished(self, output: RequestOutput, now: float) -> None:
        m, times = self.metrics, output.metrics
        end = times.finished_time or now
        m.e2e.observe(max(end - times.arrival_time, 0.0))
        for index in range(self.num_completions):
            m.success.labels(m.model_name, self.finish_reasons.get(index, "abort")).inc()
        m.prompt_len.observe(output.num_prompt_tokens)
        m.output_len.observe(self.num_tokens)
        m.params_n.observe(self.num_completions)
        first_token, scheduled = times.first_token_time, times.first_scheduled_time
        if first_token is not None:
            m.decode_time.observe(max(end - first_token, 0.0))
            per_completion = self.num_tokens / max(self.num_completions, 1)
            if per_completion > 1:
                m.tpot.observe(max(end - first_token, 0.0) / (per_completion - 1))
        if scheduled is not None:
            m.queue_time.observe(max(scheduled - times.arrival_time, 0.0))
            m.inference_time.observe(max(end - scheduled, 0.0))
            if first_token is not None:
                m.prefill_time.observe(max(first_token - scheduled, 0.0))


class HTTPMetricsMiddleware:
    """Counts every HTTP response by handler, method and status, outside every other middleware, so the
    401s, 413s and 431s the guard sends count too."""

    def __init__(self, app: ASGIApp, metrics: ServerMetrics) -> None:
        self.app = app
        self.metrics = metrics

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        status = 500  # an exception before any response start is a 500 to the client

        async def send_and_record(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
            await send(message)

        try:
            await self.app(scope, receive, send_and_record)
        finally:
            handler = _handler_label(route_path(scope))
            self.metrics.http_requests.labels(handler, scope["method"], str(status)).inc()
