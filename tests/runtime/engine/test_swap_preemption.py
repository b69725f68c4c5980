"""Swap preemption (`preemption_mode` swap): a preempted request's blocks go to host memory and come back
when it resumes, so it computes no token twice, and greedy output is what running without preemption gives."""

from __future__ import annotations

import pytest

from model_optimizer import LLM, SamplingParams
from model_optimizer.runtime.engine.host_kv_tier import HostKVTier
from model_optimizer.runtime.engine.kv_cache import KVCacheManager
from model_optimizer.runtime.engine.request import Request

GREEDY = SamplingParams(temperature=0, max_tokens=24, ignore_eos=True)
PROMPTS = [[(i * 31 + j * 7) % 900 + 5 for j in range(14 + 5 * i)] for i in range(6)]


def test_swapped_blocks_come_back_into_fresh_blocks_and_free_their_slots():
    kv = KVCacheManager(num_blocks=8, block_size=4, host_tier=HostKVTier(4))
    tier = kv.host_tier
    request = Request("a", list(range(10, 20)), SamplingParams(max_tokens=4))
    assert kv.allocate_slots(request, 10)
    request.num_computed_tokens = 10
    table = kv.block_ids("a")
    assert kv.swap_out(request)
    kv.free(request)
    saves, _ = tier.take_copies()
    assert [b for b, _ in saves] == table and len(tier.free_slots) == 1  # 3 blocks in 3 held slots
    request.num_swapped_tokens = 10
    assert kv.swap_in(request, 1)
    _, loads = tier.take_copies()
    assert [s for s, _ in loads] == [s for _, s in saves] and [b for _, b in loads] == kv.block_ids("a")
    assert len(tier.free_slots) == 4 and not tier.swapped  # the slots are free once the loads are taken
    assert (tier.num_swapped_out, tier.num_swapped_in) == (3, 3)


def test_swap_out_needs_room_and_never_takes_slots_a_load_reads():
    tier = HostKVTier(2)
    tier.pin([])
    assert tier.swap_out("a", [0, 1])
    assert not tier.swap_out("b", [2])  # both slots held for "a": b is recomputed instead
    tier.drop_swapped("a")  # "a" was aborted while swapped out
    assert sorted(tier.free_slots) == [0, 1]


@pytest.fixture(scope="module")
def runs(tiny_model):
    """Greedy tokens and stats: a roomy pool (no preemption), then 16 blocks of 4 with each mode, and swap
    with a host tier too small for every preempted request (those it cannot hold are recomputed)."""
    model = str(tiny_model("qwen3"))
    kwargs = dict(dtype="float32", block_size=4, max_model_len=64, max_num_seqs=6)
    results = {}
    for name, extra in {
        "roomy": dict(num_kv_blocks=256),
        "recompute": dict(num_kv_blocks=16),
        "swap": dict(num_kv_blocks=16, preemption_mode="swap", kv_offloading_size=1e-3),
        "swap_tight": dict(num_kv_blocks=16, preemption_mode="swap", kv_offloading_size=1.5e-4),  # 9 slots
    }.items():
        llm = LLM(model, **kwargs, **extra)
        outputs = llm.generate(PROMPTS, GREEDY)
        results[name] = ([o.outputs[0].token_ids for o in outputs], llm.engine.stats())
    return results


def test_greedy_output_is_identical_with_swap_recompute_and_no_preemption(runs):
    expected, roomy = runs["roomy"]
    assert roomy.num_preemptions == 0
    for mode in ("recompute", "swap", "swap_tight"):
        tokens, stats = runs[mode]
        assert stats.num_preemptions > 0, mode
        assert tokens == expected, mode


def test_swap_copies_blocks_out_and_back_instead_of_recomputing(runs):
    _, swap = runs["swap"]
    _, recompute = runs["recompute"]
    assert swap.num_swapped_out_blocks > 0 and swap.num_swapped_in_blocks == swap.num_swapped_out_blocks
    assert recompute.num_swapped_out_blocks == 0
    assert swap.num_free_blocks == swap.num_blocks  # every block came back to the pool
    assert swap.num_prompt_tokens == sum(map(len, PROMPTS)) - swap.prefix_cache_hits  # nothing computed twice
    assert recompute.num_prompt_tokens > swap.num_prompt_tokens
    _, tight = runs["swap_tight"]
    assert tight.num_swapped_in_blocks == tight.num_swapped_out_blocks > 0


def test_swap_without_the_host_tier_is_a_clear_error(tiny_model):
    with pytest.raises(ValueError, match="preemption_mode swap .* set kv_offloading_size"):
        LLM(str(tiny_model("qwen3")), preemption_mode="swap")
    with pytest.raises(ValueError, match="preemption_mode"):
        LLM(str(tiny_model("qwen3")), preemption_mode="sometimes")
