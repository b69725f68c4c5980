"""Scheduler with a fake runner that returns fixed tokens: budget accounting, chunking, preemption."""

from __future__ import annotations

import pytest

from model_optimizer.runtime.engine.kv_cache import KVCacheManager
from model_optimizer.runtime.engine.request import Request, RequestStatus
from model_optimizer.runtime.engine.scheduler import Scheduler
from model_optimizer.runtime.engine.scheduler_config import SchedulerConfig
from model_optimizer.runtime.sampling_params import SamplingParams


def make_scheduler(
    num_blocks=64, block_size=4, budget=32, max_seqs=8, policy="fcfs", chunked=True, **long
) -> Scheduler:
    cfg = SchedulerConfig(
        max_num_seqs=max_seqs,
        max_num_batched_tokens=budget,
        max_model_len=256,
        enable_chunked_prefill=chunked,
        policy=policy,
        **long,
    )
    return Scheduler(cfg, KVCacheManager(num_blocks, block_size))


def request(rid: str, num_prompt: int, max_tokens: int = 4, priority: int = 0) -> Request:
    first = sum(map(ord, rid))  # distinct prompts per id, so no accidental prefix hits
    return Request(
        rid,
        [first + i for i in range(num_prompt)],
        SamplingParams(max_tokens=max_tokens),
        max_tokens=max_tokens,
        priority=priority,
    )


def run_step(s: Scheduler):
    out = s.schedule()
    s.update_from_output(out, {rid: (7, None) for rid in out.sampling_request_ids})
    return out


def test_budget_is_respected_and_long_prompt_is_chunked():
    s = make_scheduler(budget=10)
    s.add_request(request("a", 25))
    sizes = [run_step(s).num_scheduled_tokens["a"] for _ in range(3)]
    assert sizes == [10, 10, 5]
    assert s.requests["a"].num_output_tokens == 1


def test_running_requests_go_first_then_waiting_fill_the_rest():
    s = make_scheduler(budget=8)
    s.add_request(request("a", 4))
    run_step(s)
    s.add_request(request("b", 20))
    out = run_step(s)
    assert out.num_scheduled_tokens == {"a": 1, "b": 7}
    assert out.total_num_scheduled_tokens <= 8


def test_max_num_seqs_caps_the_batch():
    s = make_scheduler(max_seqs=2)
    for rid in "abc":
        s.add_request(request(rid, 3))
    out = run_step(s)
    assert set(out.num_scheduled_tokens) == {"a", "b"} and s.num_waiting == 1


def test_preemption_frees_latest_arrival_and_recomputes_it():
    s = make_scheduler(num_blocks=4, block_size=4, budget=64)
    a, b = request("a", 7, max_tokens=8), request("b", 7, max_tokens=8)
    s.add_request(a)
    s.add_request(b)
    while s.has_unfinished():
        run_step(s)
    # both need 4 blocks at the end (7 + 8 tokens), together 8 > 4: the later one yields
    assert b.num_preemptions >= 1 and a.num_preemptions == 0
    assert a.num_output_tokens == b.num_output_tokens == 8
    assert b.status is RequestStatus.FINISHED_LENGTH
    assert s.kv_cache.pool.num_free_blocks == 4


def test_priority_policy_orders_waiting_queue():
    s = make_scheduler(max_seqs=1, policy="priority")
    s.add_request(request("low", 3, priority=5))
    s.add_request(request("high", 3, priority=0))
    out = run_step(s)
    assert list(out.num_scheduled_tokens) == ["high"]


def test_priority_preemption_takes_the_lower_priority_request_that_started_first():
    """The victim is the lowest-priority running request even when it was admitted before the one that needs
    blocks (it used to be scheduled first in the step, out of the victims' reach: the high one preempted
    itself)."""
    s = make_scheduler(num_blocks=4, block_size=4, budget=64, policy="priority")
    # 4 blocks of 4: each takes 2; high (7 tokens) needs its third at its 9th token, before low (5) does
    low, high = request("low", 5, max_tokens=8, priority=5), request("high", 7, max_tokens=8, priority=0)
    s.add_request(low)
    run_step(s)
    s.add_request(high)
    while s.has_unfinished():
        run_step(s)
    assert high.num_preemptions == 0 and low.num_preemptions >= 1
    assert low.num_output_tokens == high.num_output_tokens == 8
    assert s.kv_cache.pool.num_free_blocks == 4


def test_refuses_requests_that_can_never_fit():
    s = make_scheduler(num_blocks=4, block_size=4)
    with pytest.raises(ValueError, match="max_model_len"):
        s.add_request(request("a", 256))
    with pytest.raises(ValueError, match="whole cache has 4"):
        s.add_request(request("b", 10, max_tokens=20))
    no_chunk = make_scheduler(budget=8, chunked=False)
    with pytest.raises(ValueError, match="chunked prefill is off"):
        no_chunk.add_request(request("c", 9))


def test_abort_returns_every_block_at_once():
    s = make_scheduler(num_blocks=16)
    s.add_request(request("a", 9))
    s.add_request(request("b", 5))
    run_step(s)
    assert s.kv_cache.pool.num_free_blocks < 16
    s.abort("a")
    s.abort("b")
    assert s.kv_cache.pool.num_free_blocks == 16 and not s.has_unfinished()
    assert s.abort("a") is None  # unknown now: ignored


def test_finished_requests_are_reported_to_the_runner_once():
    s = make_scheduler()
    s.add_request(request("a", 3, max_tokens=1))
    run_step(s)
    assert s.schedule().finished_request_ids == {"a"}  # an empty step: the runner does not see it ...
    s.add_request(request("b", 3, max_tokens=1))
    out = s.schedule()
    assert out.finished_request_ids == {"a"} and not out.is_empty  # ... so the next step carries it
    s.update_from_output(out, {"b": (7, None)})
    assert s.schedule().finished_request_ids == {"b"}


def test_a_waiting_request_counts_its_prefix_lookup_once():
    """B waits for blocks while A runs: its lookups on every retry must not inflate the hit rate."""
    s = make_scheduler(num_blocks=8, block_size=4, budget=64)
    a, b = request("a", 28, max_tokens=4), request("b", 12, max_tokens=4)
    s.add_request(a)
    s.add_request(b)
    steps = 0
    while s.has_unfinished():
        run_step(s)
        steps += 1
    assert steps > 4 and b.num_preemptions == 0  # b waited behind a for several steps
    assert s.kv_cache.stats.queries == a.num_prompt_tokens + b.num_prompt_tokens
    assert s.kv_cache.stats.hits == 0


# long prefills: max_model_len 256 makes the default long_prefill_token_threshold 10 tokens (4%)


def test_a_short_prompt_behind_a_queue_of_long_ones_gets_into_the_first_batch():
    s = make_scheduler(num_blocks=128, budget=64)
    for i in range(6):
        s.add_request(request(f"long{i}", 40))
    s.add_request(request("short", 5))
    out = s.schedule()
    assert out.num_scheduled_tokens["short"] == 5
    # the first long prompt still gets its whole prompt, the next one the rest: nothing of the budget is lost
    assert out.num_scheduled_tokens == {"long0": 40, "short": 5, "long1": 19}
    assert {r.request_id for r in out.new_requests} == {"long0", "short", "long1"}


def test_long_prompts_alone_fill_the_budget_in_queue_order():
    s = make_scheduler(num_blocks=128, budget=64)
    for i in range(3):
        s.add_request(request(f"long{i}", 40))
    assert run_step(s).num_scheduled_tokens == {"long0": 40, "long1": 24}
    assert run_step(s).num_scheduled_tokens == {"long0": 1, "long1": 16, "long2": 40}


def test_a_prompt_longer_than_the_budget_leaves_room_for_a_short_one():
    s = make_scheduler(num_blocks=128, budget=32)
    s.add_request(request("huge", 200))
    assert run_step(s).num_scheduled_tokens == {"huge": 32}
    s.add_request(request("short", 5))
    out = run_step(s)
    assert out.num_scheduled_tokens == {"huge": 27, "short": 5}  # huge took its first chunk, then the rest
    assert "short" in out.sampling_request_ids


def test_long_prefills_always_progress_and_the_bound_is_configurable():
    s = make_scheduler(num_blocks=256, budget=20, max_seqs=16)
    s.add_request(request("long", 40))
    for i in range(6):
        s.add_request(request(f"s{i}", 5))
    assert run_step(s).num_scheduled_tokens == {"long": 10, "s0": 5, "s1": 5}  # shorts never starve a long prompt
    two = make_scheduler(num_blocks=256, budget=30, max_num_partial_prefills=2)
    for rid in ("a", "b", "c"):
        two.add_request(request(rid, 40))
    two.add_request(request("short", 5))
    assert two.schedule().num_scheduled_tokens == {"a": 15, "b": 10, "short": 5}


def test_threshold_and_off_switches():
    strict = make_scheduler(num_blocks=128, budget=64, long_prefill_token_threshold=256)  # nothing is long
    for i in range(2):
        strict.add_request(request(f"long{i}", 40))
    strict.add_request(request("short", 5))
    assert strict.schedule().num_scheduled_tokens == {"long0": 40, "long1": 24}  # first come, first served
    no_chunks = make_scheduler(num_blocks=128, budget=64, chunked=False)
    no_chunks.add_request(request("long", 40))
    no_chunks.add_request(request("short", 5))
    assert no_chunks.schedule().num_scheduled_tokens == {"long": 40, "short": 5}
    with pytest.raises(ValueError, match="max_num_partial_prefills"):
        make_scheduler(max_num_partial_prefills=0)


@pytest.mark.parametrize("seed", range(6))
def test_random_mixes_of_long_and_short_prompts_all_finish_within_budget(seed):
    import random

    rng = random.Random(seed)
    s = make_scheduler(
        num_blocks=rng.choice([24, 40, 128]),
        budget=rng.choice([16, 32, 64]),
        max_seqs=rng.choice([3, 8]),
        max_num_partial_prefills=rng.choice([1, 2]),
    )
    requests = []
    for _ in range(400):
        if len(requests) < 30 and rng.random() < 0.3:
            r = request(f"r{len(requests)}", rng.choice([2, 5, 9, 30, 60]), max_tokens=rng.randint(1, 8))
            s.add_request(r)
            requests.append(r)
        out = run_step(s)
        assert out.total_num_scheduled_tokens <= s.config.max_num_batched_tokens
        if not out.is_empty:
            assert out.total_num_scheduled_tokens > 0
    while s.has_unfinished():
        run_step(s)
    assert all(r.finished and r.num_output_tokens == r.max_tokens for r in requests)
    assert s.kv_cache.pool.num_free_blocks == s.kv_cache.num_blocks and not s._short_waiting
