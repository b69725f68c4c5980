"""The engine's gauges and counters for /metrics, read from the AsyncEngine's latest stats snapshot at scrape
time (metrics.py registers it): vLLM's names where vLLM has the figure, `mopt:` for the rest. The offline
`LLM.get_metrics()` reads the same collector over its engine's stats (runtime/llm_metrics.py), so both give
one list of names."""

from __future__ import annotations

from collections.abc import Callable, Iterator

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector

from model_optimizer.runtime.engine.engine import EngineStats
from model_optimizer.runtime.spec_decode.config import SpeculativeConfig


class EngineCollector(Collector):
    """Engine state from the latest stats snapshot (None while the model loads)."""

    def __init__(
        self,
        model_name: str,
        stats: Callable[[], EngineStats | None],
        speculative: SpeculativeConfig | None = None,
    ) -> None:
        self.model_name = model_name
        self.stats = stats
        self.speculative = speculative
        """The engine's speculative decoding: vLLM's spec_decode counters are exported (as vLLM does) only when
        it is configured, the per-position one for each of its num_speculative_tokens positions."""

    def collect(self) -> Iterator:
        s = self.stats()
        if s is None:  # no engine (yet, or an embedding model)
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
        yield counter(
            "mopt:prompt_tokens_computed",
            "Prompt tokens the engine computed: prefix-cache hits left out, a preempted prompt's recompute counted "
            "again (vllm:prompt_tokens counts each completion's whole prompt once).",
            s.num_prompt_tokens,
        )
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
        if self.speculative is not None:
            yield from self._spec_decode(s, counter, self.speculative.num_speculative_tokens)

    def _spec_decode(self, s: EngineStats, counter: Callable, num_positions: int) -> Iterator:
        yield counter("vllm:spec_decode_num_drafts", "Request-steps that verified proposals.", s.spec_num_drafts)
        yield counter("vllm:spec_decode_num_draft_tokens", "Proposed tokens verified.", s.spec_num_draft_tokens)
        yield counter("vllm:spec_decode_num_accepted_tokens", "Proposed tokens accepted.", s.spec_num_accepted_tokens)
        per_pos = CounterMetricFamily(
            "vllm:spec_decode_num_accepted_tokens_per_pos",
            "Accepted proposed tokens by position in the proposal.",
            labels=["model_name", "position"],
        )
        seen = s.spec_accepted_per_pos  # grows to a position once a proposal reached it
        for position, value in enumerate(seen + [0] * (num_positions - len(seen))):  # every position from the start
            per_pos.add_metric([self.model_name, str(position)], value)
        yield per_pos
