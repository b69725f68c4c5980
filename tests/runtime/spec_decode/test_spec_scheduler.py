"""The scheduler's side of speculative decoding, with tokens given by hand: 1 + k tokens scheduled, the
rejected positions given back, blocks wholly past the end freed and the runner told, stops among the kept
tokens, proposals never causing a preemption, and the counters."""

from __future__ import annotations

from model_optimizer.runtime.engine.kv_cache import KVCacheManager
from model_optimizer.runtime.engine.request import NONFINITE_TOKEN, Request, RequestStatus
from model_optimizer.runtime.engine.scheduler import Scheduler
from model_optimizer.runtime.engine.scheduler_config import SchedulerConfig
from model_optimizer.runtime.sampling_params import SamplingParams


def make(num_blocks: int = 32, budget: int = 32) -> Scheduler:
    config = SchedulerConfig(max_num_seqs=8, max_num_batched_tokens=budget, max_model_len=128)
    return Scheduler(config, KVCacheManager(num_blocks, block_size=4))


def decoding(s: Scheduler, rid: str = "a", prompt: int = 6, max_tokens: int = 20, **params) -> Request:
    """A request whose prompt is computed and first token sampled: it decodes from now on."""
    req = Request(
        rid, list(range(100, 100 + prompt)), SamplingParams(max_tokens=max_tokens, **params), max_tokens=max_tokens
    )
    req.eos_token_ids = frozenset({2})
    s.add_request(req)
    out = s.schedule()
    s.update_from_output(out, {rid: (50, None)})
    return req


def test_proposals_take_k_more_tokens_and_rejections_are_given_back():
    s = make()
    req = decoding(s)  # 7 tokens, 6 computed
    out = s.schedule({"a": [51, 52, 53]})
    assert out.num_scheduled_tokens == {"a": 4} and out.spec_token_ids == {"a": [51, 52, 53]}
    assert out.sampling_request_ids == {"a"} and req.num_computed_tokens == 10
    assert len(s.kv_cache.block_tables["a"]) == 3  # 10 positions in blocks of 4
    s.update_from_output(out, {"a": ([51, 60], None)})  # one proposal kept, then the target's own token
    assert req.output_token_ids == [50, 51, 60] and req.num_step_tokens == 2
    assert req.num_computed_tokens == 8  # positions 8, 9 (proposals 52, 53) given back
    assert len(s.kv_cache.block_tables["a"]) == 3  # 9 tokens still need the third block
    counters = s.spec_counters
    assert (counters.num_drafts, counters.num_draft_tokens, counters.num_accepted_tokens) == (1, 3, 1)
    assert counters.accepted_per_pos == [1, 0, 0]


def test_blocks_wholly_past_the_end_are_freed_and_the_runner_told():
    s = make()
    req = decoding(s, prompt=3)  # 4 tokens, 3 computed: one full block
    out = s.schedule({"a": [1, 2, 3, 4, 5, 6]})  # positions 3..9: blocks 0, 1, 2
    assert len(s.kv_cache.block_tables["a"]) == 3
    free_before = s.kv_cache.pool.num_free_blocks
    s.update_from_output(out, {"a": ([9], None)})  # every proposal rejected: 5 tokens need 2 blocks
    assert req.num_computed_tokens == 4 and len(s.kv_cache.block_tables["a"]) == 2
    assert s.kv_cache.pool.num_free_blocks == free_before + 1
    (cached,) = s.schedule().cached_requests
    assert cached.num_kept_blocks == 2 and cached.new_block_ids == []


def test_a_stop_among_the_kept_tokens_ends_the_request_there():
    s = make()
    req = decoding(s)
    out = s.schedule({"a": [51, 2, 53]})
    s.update_from_output(out, {"a": ([51, 2, 53], None)})  # EOS (2) kept second: the rest is dropped
    assert req.output_token_ids == [50, 51, 2] and req.status is RequestStatus.FINISHED_STOPPED
    assert "a" not in s.kv_cache.block_tables


def test_proposals_run_past_max_tokens_but_fit_max_model_len_and_the_budget():
    """Near its end a request still verifies all k (one row shape per step: the verify graphs'); what it
    keeps past max_tokens is dropped by the stop rules and its blocks go back."""
    s = make()
    req = decoding(s, max_tokens=3)  # one token out, two to go
    out = s.schedule({"a": [1, 2, 3]})
    assert out.spec_token_ids == {"a": [1, 2, 3]} and out.num_scheduled_tokens == {"a": 4}
    s.update_from_output(out, {"a": ([1, 2, 3, 4], None)})  # all kept: only two fit
    assert req.output_token_ids == [50, 1, 2] and req.status is RequestStatus.FINISHED_LENGTH
    assert "a" not in s.kv_cache.block_tables
    s2 = make(budget=3)
    decoding(s2, prompt=2)
    assert s2.schedule({"a": [1, 2, 3, 4]}).spec_token_ids == {"a": [1, 2]}  # 1 + 2 tokens fill the budget
    s3 = make(
        num_blocks=40, budget=200
    )  # max_model_len 128: a 124-token request may verify 4 proposals (positions 123..127), not 5
    decoding(s3, prompt=123, max_tokens=5)
    assert s3.schedule({"a": [1, 2, 3, 4, 5]}).spec_token_ids == {"a": [1, 2, 3, 4]}


def test_proposals_never_preempt():
    """Two requests fill the pool; the first's proposals would need a fifth block: it runs without them."""
    s = make(num_blocks=4)
    for rid, prompt, max_tokens in (("a", 8, 8), ("b", 3, 4)):
        params = SamplingParams(max_tokens=max_tokens)
        s.add_request(Request(rid, list(range(100, 100 + prompt)), params, max_tokens=max_tokens))
    out = s.schedule()  # both prompts: a in 2 blocks, b in 1
    s.update_from_output(out, {rid: (50, None) for rid in out.sampling_request_ids})
    out = s.schedule({"a": [1, 2, 3, 4]})  # a's position 8 takes the 4th block; 9..12 would need a 5th
    assert out.spec_token_ids == {} and out.num_scheduled_tokens == {"a": 1, "b": 1}
    assert s.num_preemptions == 0 and s.requests["a"].status is RequestStatus.RUNNING


def test_nonfinite_among_the_kept_tokens_fails_the_request():
    s = make()
    req = decoding(s)
    out = s.schedule({"a": [51, 52]})
    s.update_from_output(out, {"a": ([51, NONFINITE_TOKEN], None)})
    assert req.status is RequestStatus.FINISHED_ERROR and req.output_token_ids == [50]


def test_proposals_never_preempt_another_request():
    """One free block: 'a' decodes inside its blocks, 'b' needs the free block for its next token. Proposals
    for 'a' (positions past its blocks) must not take that block and cost 'b' a preemption."""
    s = make(num_blocks=5)
    for rid, prompt in (("a", 6), ("b", 8)):
        s.add_request(Request(rid, list(range(100, 100 + prompt)), SamplingParams(max_tokens=6), max_tokens=6))
    out = s.schedule()  # a in 2 blocks (positions 0..7), b in 2 (0..7)
    s.update_from_output(out, {rid: (50, None) for rid in out.sampling_request_ids})
    s.kv_cache.pool.allocate(s.kv_cache.pool.num_free_blocks - 1)  # someone else's: one block stays free
    out = s.schedule({"a": [1, 2, 3]})  # a: positions 6..9 would need a third block; b: position 8 needs one
    assert s.num_preemptions == 0 and out.num_scheduled_tokens == {"a": 1, "b": 1}
