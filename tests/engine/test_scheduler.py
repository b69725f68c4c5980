"""Scheduler with a fake runner that returns fixed tokens: budget accounting, chunking, preemption."""

from __future__ import annotations

import pytest

from model_optimizer.engine.kv_cache import KVCacheManager
from model_optimizer.engine.request import Request, RequestStatus
from model_optimizer.engine.scheduler import Scheduler, SchedulerConfig
from model_optimizer.sampling_params import SamplingParams


def make_scheduler(num_blocks=64, block_size=4, budget=32, max_seqs=8, policy="fcfs", chunked=True) -> Scheduler:
    cfg = SchedulerConfig(max_num_seqs=max_seqs, max_num_batched_tokens=budget, max_model_len=256,
                          enable_chunked_prefill=chunked, policy=policy)
    return Scheduler(cfg, KVCacheManager(num_blocks, block_size))


def request(rid: str, num_prompt: int, max_tokens: int = 4, priority: int = 0) -> Request:
    first = sum(map(ord, rid))  # distinct prompts per id, so no accidental prefix hits
    return Request(rid, [first + i for i in range(num_prompt)], SamplingParams(max_tokens=max_tokens),
                   max_tokens=max_tokens, priority=priority)


def run_step(s: Scheduler):
    out = s.schedule()
    s.update_from_output(out, {rid: (7, None) for rid in out.sampling_requests})
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
