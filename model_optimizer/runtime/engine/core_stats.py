"""The fields of the core's EngineStats (engine/messages.py), each group from the part that keeps it.

EngineCore.stats() adds its own counters (tokens, steps) to these, and the grammar fields from
ConstrainedDecoding.stats(). A part the core runs without (the host KV tier, speculative decoding)
gives no fields: EngineStats' defaults, 0, stand for it.
"""

from __future__ import annotations

from model_optimizer.runtime.engine.kv_cache import KVCacheManager
from model_optimizer.runtime.engine.scheduler import Scheduler
from model_optimizer.runtime.spec_decode.counters import SpecCounters


def scheduler_fields(scheduler: Scheduler) -> dict:
    """EngineStats' queue fields: requests running and waiting, preemptions since start."""
    return {
        "num_running": scheduler.num_running,
        "num_waiting": scheduler.num_waiting,
        "num_preemptions": scheduler.num_preemptions,
    }


def kv_cache_fields(kv_cache: KVCacheManager) -> dict:
    """EngineStats' KV-cache fields: blocks, prefix-cache hits, and the host tier's copies when it has one."""
    pool, counts = kv_cache.pool, kv_cache.stats
    fields = {
        "num_free_blocks": pool.num_free_blocks,
        "num_blocks": pool.num_blocks,
        "kv_cache_usage": pool.usage(),
        "prefix_cache_queries": counts.queries,
        "prefix_cache_hits": counts.hits,
        "host_kv_hits": counts.host_hits,
    }
    tier = kv_cache.host_tier
    if tier is not None:
        fields["num_swapped_out_blocks"] = tier.num_swapped_out
        fields["num_swapped_in_blocks"] = tier.num_swapped_in
    return fields


def spec_fields(counters: SpecCounters) -> dict:
    """EngineStats' speculative-decoding fields (the scheduler's counters, kept since start)."""
    return {
        "spec_num_drafts": counters.num_drafts,
        "spec_num_draft_tokens": counters.num_draft_tokens,
        "spec_num_accepted_tokens": counters.num_accepted_tokens,
        "spec_accepted_per_pos": list(counters.accepted_per_pos),
    }
