"""Resetting the prefix cache (vLLM's reset_prefix_cache), without torch: cached-but-free blocks become plain
free blocks and the next identical prompt misses; blocks a running request holds keep their hash and the
reset says so (False); the host tier forgets every prefix; the hit counters go on."""

from __future__ import annotations

from model_optimizer.runtime.engine.host_kv_tier import HostKVTier
from model_optimizer.runtime.engine.kv_cache import KVCacheManager
from model_optimizer.runtime.engine.request import Request
from model_optimizer.runtime.sampling_params import SamplingParams

PROMPT = list(range(10, 19))  # 9 tokens: 4 full blocks of 2 hashed, the last token always computed


def request(request_id: str, tokens: list[int] = PROMPT) -> Request:
    return Request(request_id, tokens, SamplingParams(max_tokens=4))


def admit(kv: KVCacheManager, req: Request) -> list:
    """Look the request up, count the lookup and allocate its prompt, as the scheduler admits it."""
    computed = kv.computed_blocks(req)
    assert kv.allocate_slots(req, req.num_tokens - len(computed) * kv.block_size, computed)
    kv.count_lookup(req, computed)
    return computed


def test_reset_turns_cached_free_blocks_into_plain_free_ones_and_the_next_prompt_misses():
    kv = KVCacheManager(num_blocks=8, block_size=2)
    first = request("a")
    admit(kv, first)
    kv.free(first)
    assert len(kv.computed_blocks(request("b"))) == 4 and len(kv.pool.cached) == 4
    num_free, hits = kv.pool.num_free_blocks, kv.stats.hits

    assert kv.reset_prefix_cache()
    assert not kv.pool.cached and all(b.block_hash is None for b in kv.pool.free_queue.values())
    assert kv.pool.num_free_blocks == num_free  # nothing was lost: the blocks are free, only uncached
    again = request("c")
    assert admit(kv, again) == []
    assert kv.stats.hits == hits and kv.stats.queries == 2 * len(PROMPT)  # the counters go on
    assert len(kv.pool.cached) == 4  # and the prompt is cached afresh


def test_blocks_a_running_request_holds_stay_cached_and_the_reset_says_so():
    kv = KVCacheManager(num_blocks=16, block_size=2)
    done, running = request("done", [5, 6, 7, 8, 9]), request("running")
    admit(kv, done)
    kv.free(done)
    admit(kv, running)
    held = {b.block_hash for b in kv.block_tables["running"]} - {None}

    assert not kv.reset_prefix_cache()
    assert set(kv.pool.cached) == held  # only the free request's blocks were forgotten
    assert kv.computed_blocks(request("x", [5, 6, 7, 8, 9])) == []
    assert len(kv.computed_blocks(request("y"))) == 4  # a prompt sharing the running one's blocks still hits
    kv.free(running)
    assert kv.reset_prefix_cache() and not kv.pool.cached
    assert kv.computed_blocks(request("z")) == []


def test_reset_empties_the_host_tier_too():
    tier = HostKVTier(8)
    kv = KVCacheManager(num_blocks=6, block_size=2, host_tier=tier)
    first = request("a")
    admit(kv, first)
    kv.free(first)
    other = request("b", list(range(50, 61)))
    admit(kv, other)  # 6 blocks: every cached block of "a" is evicted to the host tier
    tier.take_copies()
    kv.free(other)
    assert len(tier.slots) == 4 and len(kv.computed_blocks(request("c"))) == 4  # found in host memory

    assert kv.reset_prefix_cache()
    assert not tier.slots and sorted(tier.free_slots) == list(range(8))
    assert kv.computed_blocks(request("d")) == []
    assert tier.take_copies() == ([], [])  # nothing to copy for a reset
