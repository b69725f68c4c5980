"""Block pool and KV-cache manager, without torch: eviction order, reference counts, prefix hits."""

from __future__ import annotations

import subprocess
import sys

import pytest

from model_optimizer.runtime.engine.kv_cache import BlockPool, KVCacheManager
from model_optimizer.runtime.engine.request import Request
from model_optimizer.runtime.sampling_params import SamplingParams


def make_request(request_id: str, tokens: list[int], max_tokens: int = 4) -> Request:
    return Request(request_id, tokens, SamplingParams(max_tokens=max_tokens), max_tokens=max_tokens)


def test_engine_core_imports_without_torch():
    import pkgutil

    import model_optimizer.runtime.engine as engine

    modules = [f"model_optimizer.runtime.engine.{m.name}" for m in pkgutil.iter_modules(engine.__path__)]
    assert "model_optimizer.runtime.engine.output_processor" in modules  # every module of engine/, whatever it holds
    code = f"import sys, {', '.join(modules)}; print('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def test_pool_allocates_in_order_and_frees_to_the_back():
    pool = BlockPool(4)
    a = pool.allocate(2)
    assert [b.block_id for b in a] == [0, 1] and pool.num_free_blocks == 2
    pool.free(reversed(a))  # tail first
    assert pool.num_free_blocks == 4
    with pytest.raises(RuntimeError):
        pool.allocate(5)
    assert [b.block_id for b in pool.allocate(4)] == [2, 3, 1, 0]  # never-used blocks first, then the freed
    assert pool.num_free_blocks == 0 and pool.usage() == 1.0


def test_pool_makes_blocks_only_when_first_handed_out():
    pool = BlockPool(100_000)
    assert pool.num_blocks == pool.num_free_blocks == 100_000 and not pool.free_queue
    [block] = pool.allocate(1)
    pool.free([block])
    taken = pool.allocate(3)  # the fresh blocks still come before the freed one
    assert [b.block_id for b in taken] == [1, 2, 3] and all(b.ref_cnt == 1 for b in taken)
    assert pool.num_free_blocks == 100_000 - 3 and list(pool.free_queue) == [0]


def test_reference_counts_keep_shared_blocks_until_last_release():
    pool = BlockPool(2)
    [block] = pool.allocate(1)
    pool.touch([block])
    assert block.ref_cnt == 2
    pool.free([block])
    assert pool.num_free_blocks == 1 and block.ref_cnt == 1
    pool.free([block])
    assert pool.num_free_blocks == 2


def test_eviction_takes_least_recently_freed_cached_block():
    pool = BlockPool(3)
    blocks = pool.allocate(3)
    for i, block in enumerate(blocks):
        pool.cache(block, block_hash=100 + i)
    pool.free([blocks[1], blocks[0], blocks[2]])
    [taken] = pool.allocate(1)
    assert taken is blocks[1] and taken.block_hash is None
    assert pool.lookup(101) is None and pool.lookup(100) is blocks[0]


def test_prefix_hit_counts_full_blocks_and_leaves_last_token():
    kv = KVCacheManager(num_blocks=8, block_size=4)
    first = make_request("a", list(range(10)))
    assert kv.computed_blocks(first) == []
    assert kv.allocate_slots(first, 10)
    kv.free(first)
    second = make_request("b", list(range(8)) + [99, 98])
    hits = kv.computed_blocks(second)
    assert len(hits) == 2  # blocks [0..3] and [4..7]
    assert kv.stats.queries == 0  # a lookup alone counts nothing: a waiting request looks up every step
    kv.count_lookup(second, hits)
    assert kv.stats.hits == 8 and kv.stats.queries == 10
    # a prompt that is exactly two full blocks can reuse only one: its last token must be computed
    third = make_request("c", list(range(8)))
    assert len(kv.computed_blocks(third)) == 1


def test_allocation_fails_cleanly_and_counts_revived_blocks():
    kv = KVCacheManager(num_blocks=3, block_size=4)
    a = make_request("a", list(range(8)))
    assert kv.allocate_slots(a, 8)
    kv.free(a)
    b = make_request("b", list(range(8)) + [7, 7, 7, 7, 7])
    hits = kv.computed_blocks(b)
    assert len(hits) == 2
    # 2 cached blocks are revived from the free queue; 1 more is free; b needs 2 new ones
    assert not kv.allocate_slots(b, 5, hits)
    assert kv.pool.num_free_blocks == 3 and all(h.ref_cnt == 0 for h in hits)
    assert kv.allocate_slots(b, 4, hits)
    assert kv.pool.num_free_blocks == 0


def test_changed_token_breaks_the_hash_chain():
    kv = KVCacheManager(num_blocks=8, block_size=2)
    a = make_request("a", [1, 2, 3, 4, 5, 6, 7])
    kv.allocate_slots(a, 7)
    b = make_request("b", [1, 9, 3, 4, 5, 6, 7])
    assert kv.computed_blocks(b) == []


def test_prefix_caching_off_never_hits():
    kv = KVCacheManager(num_blocks=8, block_size=2, enable_prefix_caching=False)
    a = make_request("a", [1, 2, 3, 4, 5])
    kv.allocate_slots(a, 5)
    kv.free(a)
    assert kv.computed_blocks(make_request("b", [1, 2, 3, 4, 5])) == []


def test_forget_drops_a_requests_cache_entries_held_or_freed():
    kv = KVCacheManager(num_blocks=8, block_size=4)
    bad = make_request("bad", list(range(10)))
    assert kv.allocate_slots(bad, 10)
    kv.free(bad)  # preempted: its two full blocks stay cached while free
    reader = make_request("reader", list(range(9)))
    held = kv.computed_blocks(reader)
    assert len(held) == 2 and kv.allocate_slots(reader, 1, held)  # another request holds them now
    kv.forget(bad)
    assert kv.computed_blocks(make_request("later", list(range(10)))) == []  # gone from the cache ...
    assert kv.block_tables["reader"][:2] == held  # ... but still the reader's
    kv.free(reader)
    assert kv.pool.num_free_blocks == 8 and not kv.pool.cached
