"""Prometheus metrics named as vLLM's (`vllm:`), so existing Grafana dashboards work, plus `mopt:` extras.

Each app has its own CollectorRegistry (tests run several apps in one process). With several
frontend processes (--api-server-count) prometheus_client runs in its multiprocess mode (values in
files of one folder, frontends.py) and /metrics sums them, whichever frontend answers. Engine gauges and
counters are read from the AsyncEngine's stats snapshot at scrape time; latency histograms, the prompt-token
counter and the finished-request counter are observed by the server as outputs arrive (an embedding model's,
which has no engine, by its route: each input a finished request, as vLLM counts pooling requests). Names,
types, buckets and the `model_name` label follow vLLM 0.14's v1 logger (vllm/v1/metrics/loggers.py;
tests/runtime/server/test_metrics_names.py holds the lists), and so does what is observed: the per-request
histograms and the success counter once per completion, as vLLM's frontend handles each of an n > 1
request's completions as a request of its own. vLLM's second label, `engine`, is left out: one server runs one
engine. `http_requests_total` (handler, method, status) is the counter vLLM's HTTP instrumentation exports,
with exact status codes.

This module holds the registry (ServerMetrics), the buckets and the per-request observations (RequestTracker);
the engine's gauges and counters are engine_collector.py's, the per-token histogram token_histogram.py's and
the HTTP counter's middleware http_metrics.py's.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest

from model_optimizer.runtime.engine.engine import EngineStats
from model_optimizer.runtime.engine.outputs import RequestMetrics, RequestOutput
from model_optimizer.runtime.server.engine_collector import EngineCollector
from model_optimizer.runtime.server.token_histogram import PerTokenHistogram, TokenHistogram
from model_optimizer.runtime.spec_decode.config import SpeculativeConfig

# vLLM 0.14's bounds, exactly (PrometheusStatLogger in vllm/v1/metrics/loggers.py, whose lists are the same from
# v0.8 to releases after 0.14): `sum by (le)` over a fleet of mopt and vLLM servers needs one `le` set, and a
# slow request must not fall into +Inf here while vLLM's buckets still place it.
TTFT_BUCKETS = (0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0)
TTFT_BUCKETS += (40.0, 80.0, 160.0, 640.0, 2560.0)
ITL_BUCKETS = (0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0, 40.0)
ITL_BUCKETS += (80.0,)
"""Inter-token latency and each request's mean time per output token."""
REQUEST_LATENCY_BUCKETS = (0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0, 60.0, 120.0)
REQUEST_LATENCY_BUCKETS += (240.0, 480.0, 960.0, 1920.0, 7680.0)
"""End-to-end latency and the queue, prefill, decode and inference phases."""
TOKEN_BUCKETS = tuple(m * 10**e for e in range(7) for m in (1, 2, 5))
"""Prompt and output lengths: 1, 2, 5, 10 ... 5,000,000 tokens, cut at the model's max_model_len as vLLM's
1-2-5 series is (token_buckets)."""


def token_buckets(max_model_len: int | None) -> tuple[int, ...]:
    """TOKEN_BUCKETS up to max_model_len (all of them when unknown), as vLLM builds its length buckets."""
    return TOKEN_BUCKETS if max_model_len is None else tuple(b for b in TOKEN_BUCKETS if b <= max_model_len)


N_BUCKETS = (1, 2, 5, 10, 20)
FINISH_REASONS = ("stop", "length", "abort", "error")
"""vLLM's FinishReason values: each has a vllm:request_success series from the start, at 0 until it happens."""


def multiprocess() -> bool:
    """Whether prometheus_client keeps its values in the shared folder of several frontends."""
    return bool(os.environ.get("PROMETHEUS_MULTIPROC_DIR"))


class ServerMetrics:
    def __init__(
        self,
        model_name: str,
        stats: Callable[[], EngineStats | None],
        speculative: SpeculativeConfig | None = None,
        max_model_len: int | None = None,
    ) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        self.model_name = model_name
        self.engine_collector = EngineCollector(model_name, stats, speculative)
        self.registry.register(self.engine_collector)
        labels = ["model_name"]

        def histogram(name: str, doc: str, buckets: tuple) -> Any:
            return Histogram(name, doc, labels, buckets=buckets, registry=self.registry).labels(model_name)

        self.ttft = histogram("vllm:time_to_first_token_seconds", "Time to first token.", TTFT_BUCKETS)
        self.itl = self._per_token_histogram("vllm:inter_token_latency_seconds", "Time between output tokens.")
        self.e2e = histogram(
            "vllm:e2e_request_latency_seconds", "Request latency from arrival to finish.", REQUEST_LATENCY_BUCKETS
        )
        self.success = Counter(
            "vllm:request_success",
            "Finished sequences by finish reason.",
            ["model_name", "finished_reason"],
            registry=self.registry,
        )
        for reason in FINISH_REASONS:
            self.success.labels(model_name, reason)
        self.prompt_tokens = Counter(
            "vllm:prompt_tokens",
            "Prompt tokens of the completions started: each one's whole prompt, once, cached or not.",
            labels,
            registry=self.registry,
        ).labels(model_name)
        self.tpot = histogram(
            "vllm:request_time_per_output_token_seconds",
            "Mean time per output token after the first, per finished completion.",
            ITL_BUCKETS,
        )
        self.queue_time = histogram(
            "vllm:request_queue_time_seconds", "Time from arrival to first schedule.", REQUEST_LATENCY_BUCKETS
        )
        self.prefill_time = histogram(
            "vllm:request_prefill_time_seconds", "Time from first schedule to first token.", REQUEST_LATENCY_BUCKETS
        )
        self.decode_time = histogram(
            "vllm:request_decode_time_seconds", "Time from first token to finish.", REQUEST_LATENCY_BUCKETS
        )
        self.inference_time = histogram(
            "vllm:request_inference_time_seconds", "Time from first schedule to finish.", REQUEST_LATENCY_BUCKETS
        )
        self.prompt_len = histogram(
            "vllm:request_prompt_tokens", "Prompt tokens per finished completion.", token_buckets(max_model_len)
        )
        self.output_len = histogram(
            "vllm:request_generation_tokens", "Output tokens per finished completion.", token_buckets(max_model_len)
        )
        self.params_n = histogram("vllm:request_params_n", "Completions (n) per finished request.", N_BUCKETS)
        self.http_requests = Counter(
            "http_requests",
            "HTTP requests by handler, method and status code.",
            ["handler", "method", "status"],
            registry=self.registry,
        )

    def _per_token_histogram(self, name: str, doc: str) -> Any:
        """A histogram observed once per streamed token: the lock-free TokenHistogram, or in the multiprocess
        mode a prometheus_client Histogram (only those are summed over processes)."""
        if not multiprocess():
            return TokenHistogram(name, doc, self.model_name, ITL_BUCKETS, self.registry)
        histogram = Histogram(name, doc, ["model_name"], buckets=ITL_BUCKETS, registry=self.registry)
        return PerTokenHistogram(histogram.labels(self.model_name))

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
        self.prompt_tokens.inc(sum(num_prompt_tokens))

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

    Each completion counts as vLLM counts each child request of an n > 1 request (IterationStats and
    PrometheusStatLogger.record in vLLM 0.14's vllm/v1/metrics/): its first token adds its time to first
    token and its whole prompt to vllm:prompt_tokens; the request's end adds its finish reason and one
    observation to each per-request histogram (vllm:request_params_n: one per request). The times are the
    request's (RequestOutput.metrics: its first completion's schedule and first token, its last completion's
    end), as the outputs carry no times per completion: with n > 1 a completion that ended early shows the
    request's end.
    """

    def __init__(self, metrics: ServerMetrics, num_completions: int) -> None:
        self.metrics = metrics
        self.num_completions = num_completions
        self.num_tokens = [0] * num_completions
        """Per completion index: its tokens so far (0: its first has not arrived)."""
        self.last_time: float | None = None
        self.finish_reasons: dict[int, str] = {}
        """Completion index -> its finish_reason, as the deltas report them."""

    def observe(self, output: RequestOutput) -> int:
        """Observe one output (called for every chunk: kept cheap); returns its number of tokens."""
        now = time.time()
        first_token = output.metrics.first_token_time or now
        since = self.last_time if self.last_time is not None else first_token
        new = 0
        for completion in output.outputs:
            num_new = len(completion.token_ids)
            if num_new:
                new += num_new
                started = self.num_tokens[completion.index] > 0
                if not started:
                    self._started(output, first_token)
                self.num_tokens[completion.index] += num_new
                num_later = num_new if started else num_new - 1
                if num_later:
                    self.metrics.itl.observe(max(now - since, 0.0) / num_later, num_later)
            if completion.finish_reason is not None:
                self.finish_reasons[completion.index] = completion.finish_reason
        if new > 0:
            self.last_time = now
        if output.finished:
            self._finished(output, now)
        return new

    def _started(self, output: RequestOutput, first_token: float) -> None:
        """A completion's first token: its time to first token, and its whole prompt in vllm:prompt_tokens (as
        vLLM counts a child request's prompt with its first output, prefix-cache hits included)."""
        m = self.metrics
        m.ttft.observe(max(first_token - output.metrics.arrival_time, 0.0))
        m.prompt_tokens.inc(output.num_prompt_tokens)

    def _finished(self, output: RequestOutput, now: float) -> None:
        m, times = self.metrics, output.metrics
        end = times.finished_time or now
        for index, num_tokens in enumerate(self.num_tokens):
            m.success.labels(m.model_name, self.finish_reasons.get(index, "abort")).inc()
            self._completion_finished(times, end, output.num_prompt_tokens, num_tokens)
        m.params_n.observe(self.num_completions)

    def _completion_finished(self, times: RequestMetrics, end: float, num_prompt_tokens: int, num_tokens: int) -> None:
        """One completion's observations in the per-request histograms (vLLM's FinishedRequestStats)."""
        m = self.metrics
        m.e2e.observe(max(end - times.arrival_time, 0.0))
        m.prompt_len.observe(num_prompt_tokens)
        m.output_len.observe(num_tokens)
        first_token, scheduled = times.first_token_time, times.first_scheduled_time
        if first_token is not None:
            decode = max(end - first_token, 0.0)
            m.decode_time.observe(decode)
            if num_tokens > 1:  # the first token is the prefill's
                m.tpot.observe(decode / (num_tokens - 1))
        if scheduled is not None:
            m.queue_time.observe(max(scheduled - times.arrival_time, 0.0))
            m.inference_time.observe(max(end - scheduled, 0.0))
            if first_token is not None:
                m.prefill_time.observe(max(first_token - scheduled, 0.0))
