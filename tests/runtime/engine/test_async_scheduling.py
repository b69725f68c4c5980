"""Asynchronous scheduling: the next step is launched before the previous one is collected, and
every output is the same as with synchronous steps (tiny Qwen3 on the CPU)."""

from __future__ import annotations

import pytest

from model_optimizer import LLM, SamplingParams
from model_optimizer.runtime.engine.kv_cache import KVCacheManager
from model_optimizer.runtime.engine.request import Request
from model_optimizer.runtime.engine.scheduler import Scheduler
from model_optimizer.runtime.engine.scheduler_config import SchedulerConfig

from .test_llm_features import random_prompts, token_ids

SEEDED = SamplingParams(temperature=0.9, top_k=40, seed=7, max_tokens=14, ignore_eos=True)
GREEDY = SamplingParams(temperature=0, max_tokens=14, ignore_eos=True)


@pytest.fixture(scope="module")
def model_dir(tiny_model):
    return str(tiny_model("qwen3"))


def mixed_params(count: int) -> list[SamplingParams]:
    """Greedy, seeded, penalised (forces a collect before launch) and logprob requests, in turn."""
    kinds = [
        GREEDY,
        SEEDED,
        GREEDY.clone(repetition_penalty=1.3, max_tokens=9),
        GREEDY.clone(logprobs=2, max_tokens=11),
    ]
    return [
        kinds[i % len(kinds)].clone(seed=SEEDED.seed + i) if i % len(kinds) == 1 else kinds[i % len(kinds)]
        for i in range(count)
    ]


def logprob_rows(outputs) -> list[tuple]:
    """(token, rank, logprob, top ids) of every reported logprob entry, in order."""
    return [
        (lp.token_id, lp.rank, lp.logprob, sorted(lp.top))
        for o in outputs
        for c in o.outputs
        for lp in c.logprobs or []
    ]


def assert_same_logprobs(got, expected) -> None:
    """Equal up to float summation order: batches differ between the two modes (after preemption)."""
    assert [(t, r, top) for t, r, _, top in got] == [(t, r, top) for t, r, _, top in expected]
    assert [v for _, _, v, _ in got] == pytest.approx([v for _, _, v, _ in expected], abs=1e-4)


@pytest.mark.parametrize(
    "config",
    [
        {"kv_cache_memory": 1 << 24},
        {"kv_cache_memory": 1 << 24, "max_num_batched_tokens": 7},
        {"num_kv_blocks": 40, "block_size": 4, "max_model_len": 160, "enable_prefix_caching": False},
        {"kv_cache_memory": 1 << 24, "max_num_seqs": 3},
    ],
    ids=["roomy", "tiny-chunks", "preemption", "few-seqs"],
)
def test_async_outputs_equal_sync_outputs(model_dir, config):
    prefix = random_prompts(1, seed=11, lo=33, hi=34)[0]
    prompts = random_prompts(10, seed=12, lo=5, hi=40, shared_prefix=prefix)
    params = mixed_params(len(prompts))
    expected = LLM(model_dir, async_scheduling=False, **config).generate(prompts, params)
    async_llm = LLM(model_dir, async_scheduling=True, **config)
    outputs = async_llm.generate(prompts, params)
    assert token_ids(outputs) == token_ids(expected)
    assert_same_logprobs(logprob_rows(outputs), logprob_rows(expected))
    assert len(logprob_rows(outputs)) == 2 * 11
    assert [len(o.outputs[0].token_ids) for o in outputs] == [p.max_tokens for p in params]
    stats = async_llm.engine.stats()
    assert stats.num_free_blocks == stats.num_blocks  # nothing leaked
    if "num_kv_blocks" in config:
        assert stats.num_preemptions > 0


def _spy(runner) -> list:
    """Record launches (with which step they were told is pending) and collects, by launch number."""
    launch, collect = runner.launch, runner.collect
    calls: list = []
    handles: list = []

    def number(handle) -> int | None:
        return None if handle is None else next(i + 1 for i, h in enumerate(handles) if h is handle)

    def spy_launch(out, pending):
        handles.append(launch(out, pending))
        calls.append(("launch", len(handles), number(pending)))
        return handles[-1]

    def spy_collect(handle):
        calls.append(("collect", number(handle)))
        return collect(handle)

    runner.launch, runner.collect = spy_launch, spy_collect
    return calls


def test_next_step_is_launched_before_the_previous_is_collected(model_dir):
    llm = LLM(model_dir, kv_cache_memory=1 << 24)
    calls = _spy(llm.runner)
    llm.generate([[5, 6, 7, 8]], GREEDY.clone(max_tokens=4))
    # prefill, then three decodes; each collect comes after the next launch, the last one alone
    assert calls == [
        ("launch", 1, None),
        ("launch", 2, 1),
        ("collect", 1),
        ("launch", 3, 2),
        ("collect", 2),
        ("launch", 4, 3),
        ("collect", 3),
        ("collect", 4),
    ]


def test_penalties_collect_the_step_in_flight_before_the_next_launch(model_dir):
    """A penalised request reads its history on the host: the engine collects first, nothing is pending."""
    llm = LLM(model_dir, kv_cache_memory=1 << 24)
    calls = _spy(llm.runner)
    llm.generate([[5, 6, 7, 8]], GREEDY.clone(max_tokens=3, repetition_penalty=1.3))
    assert calls == [
        ("launch", 1, None),
        ("collect", 1),
        ("launch", 2, None),
        ("collect", 2),
        ("launch", 3, None),
        ("collect", 3),
    ]


def test_stops_found_late_still_cut_exactly(model_dir):
    """EOS-like stops (token ids, stop strings) are seen one step late; the extra token is dropped."""
    prompt = random_prompts(1, seed=13)[0]
    sync = LLM(model_dir, kv_cache_memory=1 << 24, async_scheduling=False)
    full = sync.generate([prompt], GREEDY.clone(max_tokens=30))[0].outputs[0]
    stop_id = full.token_ids[3]
    stop_text = full.text[4:8]
    llm = LLM(model_dir, kv_cache_memory=1 << 24)
    for params in (
        GREEDY.clone(max_tokens=30, stop_token_ids=[stop_id]),
        GREEDY.clone(max_tokens=30, stop=[stop_text]),
    ):
        expected = sync.generate([prompt], params)[0].outputs[0]
        got = llm.generate([prompt], params)[0].outputs[0]
        assert (got.token_ids, got.text, got.finish_reason) == (expected.token_ids, expected.text, "stop")
    assert llm.engine.stats().num_free_blocks == llm.engine.stats().num_blocks


def test_runner_rows_are_freed_when_the_last_step_schedules_nothing(model_dir):
    """The finish of the last requests reaches the runner with the next batch, however many generate calls."""
    llm = LLM(model_dir, kv_cache_memory=1 << 24, max_num_seqs=2)
    prompts = random_prompts(2, seed=15)
    params = [
        GREEDY.clone(max_tokens=5),
        GREEDY.clone(max_tokens=6),
    ]  # the first finishes while the other's last token is pending
    first = token_ids(llm.generate(prompts, params))
    for _ in range(3):
        assert token_ids(llm.generate(prompts, params)) == first
    assert len(llm.runner.batch.requests) <= 2


def test_reused_id_after_abort_ignores_the_old_in_flight_token(model_dir):
    llm = LLM(model_dir, kv_cache_memory=1 << 24)
    engine = llm.engine
    first, second = random_prompts(2, seed=14, lo=20, hi=30)
    expected = token_ids(llm.generate([second], GREEDY))[0][0]
    engine.add_request("x", first, GREEDY)
    engine.step()
    engine.step()  # a step for "x" is in flight now
    engine.abort("x")
    engine.add_request("x", second, GREEDY)
    outputs = []
    while engine.has_unfinished_requests():
        outputs += engine.step()
    assert outputs[-1].outputs[0].token_ids == expected


def scheduler_with_one_request(max_tokens: int) -> tuple[Scheduler, Request]:
    """A scheduler of 32 blocks of 4 tokens holding request "a": 5 prompt tokens, `max_tokens` outputs."""
    config = SchedulerConfig(max_num_seqs=4, max_num_batched_tokens=64, max_model_len=64)
    scheduler = Scheduler(config, KVCacheManager(32, 4))
    request = Request("a", [1, 2, 3, 4, 5], GREEDY.clone(max_tokens=max_tokens), max_tokens=max_tokens)
    scheduler.add_request(request)
    return scheduler, request


def test_scheduler_schedules_decodes_on_pending_tokens():
    scheduler, request = scheduler_with_one_request(max_tokens=3)
    first = scheduler.schedule()
    second = scheduler.schedule()  # before the first step's token is back
    assert first.num_scheduled_tokens == {"a": 5} and second.num_scheduled_tokens == {"a": 1}
    assert request.num_pending == 2 and request.num_computed_tokens == 6
    third = scheduler.schedule()
    assert third.num_scheduled_tokens == {"a": 1} and request.num_pending == 3
    assert scheduler.schedule().is_empty  # max_tokens=3 tokens are on the way: nothing more to compute
    for out, token in ((first, 7), (second, 8), (third, 9)):
        scheduler.update_from_output(out, {"a": (token, None)})
    assert request.output_token_ids == [7, 8, 9] and request.finish_reason == "length"
    assert scheduler.kv_cache.pool.num_free_blocks == 32


def test_a_preempted_request_finished_by_its_in_flight_token_leaves_the_waiting_queue():
    scheduler, request = scheduler_with_one_request(max_tokens=1)
    first = scheduler.schedule()
    second = scheduler.schedule()
    scheduler._preempt(request, second)  # the cache ran short while the first step's token was in flight
    assert request in scheduler.waiting and scheduler.schedule().is_empty  # it waits for that token
    scheduler.update_from_output(first, {"a": (7, None)})
    assert request.output_token_ids == [7] and request.finish_reason == "length"
    assert not scheduler.has_unfinished() and scheduler.kv_cache.pool.num_free_blocks == 32


@pytest.mark.parametrize("seed", [21, 22, 23])
def test_random_mixes_of_stops_lengths_and_preemption_match_sync(model_dir, seed):
    """Random prompts, lengths, stop tokens, n and a small cache with short chunks: async gives sync's outputs."""
    import random

    rng = random.Random(seed)
    prompts = random_prompts(12, seed=seed, lo=2, hi=50)
    params = []
    for _ in prompts:
        p = SamplingParams(
            temperature=rng.choice([0, 0.8]),
            seed=rng.randrange(100),
            max_tokens=rng.randint(1, 12),
            stop_token_ids=rng.sample(range(3, 1000), 40),
            n=rng.choice([1, 1, 2]),
        )
        params.append(p)
    config = {
        "num_kv_blocks": 26,
        "block_size": 4,
        "max_model_len": 104,
        "max_num_batched_tokens": 24,
        "max_num_seqs": 8,
    }
    expected = LLM(model_dir, async_scheduling=False, **config).generate(prompts, params)
    llm = LLM(model_dir, **config)
    got = llm.generate(prompts, params)
    assert [[(c.token_ids, c.finish_reason) for c in o.outputs] for o in got] == [
        [(c.token_ids, c.finish_reason) for c in o.outputs] for o in expected
    ]
    stats = llm.engine.stats()
    assert stats.num_free_blocks == 26 and not llm.engine.has_unfinished_requests() and stats.num_preemptions > 0
