"""The host KV tier's bookkeeping (no torch): evicted cached blocks are saved under their hash, a prefix that
misses on the GPU continues in host memory, and a slot a load of this step reads is never reused by it."""

from __future__ import annotations

from model_optimizer.runtime.engine.host_kv_tier import HostKVTier
from model_optimizer.runtime.engine.kv_cache import BlockPool, HostHit, KVCacheManager
from model_optimizer.runtime.engine.request import Request
from model_optimizer.runtime.sampling_params import SamplingParams


def request(request_id: str, tokens: list[int]) -> Request:
    return Request(request_id, tokens, SamplingParams(max_tokens=4))


def test_eviction_saves_and_lru_slots_are_reused_but_never_pinned_ones():
    tier = HostKVTier(2)
    pool = BlockPool(3, tier)
    blocks = pool.allocate(3)
    for block, block_hash in zip(blocks, (11, 12, 13)):
        pool.cache(block, block_hash)
    pool.free(blocks)
    pool.allocate(2)  # evicts the blocks of 11 and 12: both saved
    assert tier.take_copies() == ([(0, 0), (1, 1)], [])
    tier.pin([11])
    pool.allocate(1)  # evicts 13: the least recently used unpinned slot is 12's
    saves, _ = tier.take_copies()
    assert saves == [(2, 1)] and tier.contains(11) and tier.contains(13) and not tier.contains(12)


def test_a_prefix_continues_in_host_memory_and_is_loaded_into_fresh_blocks():
    kv = KVCacheManager(num_blocks=6, block_size=2, host_tier=HostKVTier(8))
    first = request("a", list(range(10, 19)))  # 9 tokens: 4 full blocks hashed
    assert kv.allocate_slots(first, 9)
    kv.free(first)
    other = request("b", list(range(50, 61)))
    assert kv.allocate_slots(other, 11)  # 6 blocks: every cached block of "a" evicted, so saved
    saves, _ = kv.host_tier.take_copies()
    assert len(saves) == 4
    kv.free(other)
    again = request("c", list(range(10, 19)) + [7, 7])
    computed = kv.computed_blocks(again)
    assert all(isinstance(hit, HostHit) for hit in computed) and len(computed) == 4
    assert kv.allocate_slots(again, 3, computed)
    _, loads = kv.host_tier.take_copies()
    table = kv.block_ids("c")
    assert [block for _, block in loads] == table[:4]
    assert {slot for slot, _ in loads} == {slot for _, slot in saves}  # read from where they were saved
    kv.count_lookup(again, computed)
    assert kv.stats.host_hits == kv.stats.hits == 8
