"""The periodic engine line of `mopt serve` (as vLLM logs one): throughput, queue, KV cache, prefix cache, and
speculative decoding's mean acceptance length when it is on.

Every `--log-interval` seconds the server compares two snapshots of the engine's counters
(AsyncEngine.stats, refreshed by the engine loop) and logs one line, only when something happened:
tokens were computed, or requests are running or waiting. An idle server stays quiet.

Prompt throughput is the prompt tokens the engine computed (mopt:prompt_tokens_computed_total: prefix-cache
hits left out, a preempted prompt's recompute counted), the work done, as vLLM's own line counts it in the
releases after 0.14 (LoggingStatLogger adds prompt_token_stats.computed, vllm/v1/metrics/loggers.py).
vllm:prompt_tokens_total, each completion's whole prompt cached or not, is counted by the frontends and is
not in the engine's snapshot.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from model_optimizer.runtime.server.state import ServerState

logger = logging.getLogger("model_optimizer.runtime.server.stats")


def stats_line(before: Any, after: Any, seconds: float) -> str | None:
    """One line describing the interval between two EngineStats snapshots; None when nothing happened
    (or `after` is missing: a core that has not reported yet). A missing `before` counts from zero: the
    core reports with its first outputs, so a first burst of work that fits one interval arrives in one
    snapshot and would otherwise never be logged."""
    if after is None:
        return None

    def delta(name: str) -> int:
        return getattr(after, name) - getattr(before, name, 0)  # before None: the engine's counters start at 0

    prompt_tokens, generation_tokens = delta("num_prompt_tokens"), delta("num_generation_tokens")
    if not (prompt_tokens or generation_tokens or after.num_running or after.num_waiting):
        return None
    queries, hits = delta("prefix_cache_queries"), delta("prefix_cache_hits")
    seconds = max(seconds, 1e-9)
    line = (
        f"prompt throughput: {prompt_tokens / seconds:.1f} tokens/s, "
        f"generation throughput: {generation_tokens / seconds:.1f} tokens/s, "
        f"running: {after.num_running} reqs, waiting: {after.num_waiting} reqs, "
        f"KV cache usage: {100 * after.kv_cache_usage:.1f}%, "
        f"prefix cache hit rate: {100 * hits / queries if queries else 0.0:.1f}%"
    )
    return line + _spec_part(before, after)


def _spec_part(before: Any, after: Any) -> str:
    """Speculative decoding over the interval (nothing when no request verified proposals in it): the mean
    acceptance length (tokens per verifying request-step, the bonus token included) and acceptance rate."""

    def delta(name: str) -> int:
        return getattr(after, name, 0) - getattr(before, name, 0)

    drafts = delta("spec_num_drafts")
    if drafts <= 0:
        return ""
    accepted, proposed = delta("spec_num_accepted_tokens"), delta("spec_num_draft_tokens")
    return (
        f", spec decode: mean acceptance length {1 + accepted / drafts:.2f}, "
        f"acceptance rate {100 * accepted / proposed if proposed else 0.0:.1f}%"
    )


async def log_stats(state: ServerState, interval: float) -> None:
    """Log stats_line every `interval` seconds for as long as the server runs (cancelled at shutdown)."""
    before, then = state.engine.stats, time.monotonic()
    while True:
        await asyncio.sleep(interval)
        after, now = state.engine.stats, time.monotonic()
        line = stats_line(before, after, now - then)
        if line is not None:
            logger.info("%s", line)
        before, then = after, now


def start_stats_logging(state: ServerState, interval: float) -> asyncio.Task | None:
    """Start the periodic line for a generation engine (not for embeddings); interval 0 turns it off."""
    if interval <= 0 or state.engine is None:
        return None
    return asyncio.ensure_future(log_stats(state, interval))
