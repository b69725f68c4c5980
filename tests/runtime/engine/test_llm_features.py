"""Engine features on a real tiny Qwen3: caching, chunking, preemption, batching, n, seeds, stops, abort."""

from __future__ import annotations

import random

import pytest

from model_optimizer import LLM, SamplingParams
from model_optimizer.runtime.sampling_params import RequestOutputKind

GREEDY = SamplingParams(temperature=0, max_tokens=12, ignore_eos=True)


def random_prompts(count: int, seed: int, lo: int = 3, hi: int = 70, shared_prefix: list[int] | None = None):
    rng = random.Random(seed)
    prefix = shared_prefix or []
    return [prefix + [rng.randrange(3, 1000) for _ in range(rng.randrange(lo, hi))] for _ in range(count)]


def token_ids(outputs):
    return [[c.token_ids for c in o.outputs] for o in outputs]


@pytest.fixture(scope="module")
def model_dir(tiny_model):
    return str(tiny_model("qwen3"))


@pytest.fixture(scope="module")
def reference(model_dir):
    """Outputs with roomy settings and no prefix caching: what every variant must reproduce."""
    llm = LLM(model_dir, kv_cache_memory=1 << 24, enable_prefix_caching=False)
    prefix = random_prompts(1, seed=1, lo=40, hi=41)[0]
    prompts = random_prompts(8, seed=2, shared_prefix=prefix)
    return prompts, token_ids(llm.generate(prompts, GREEDY))


def test_prefix_caching_gives_identical_outputs_and_counts_hits(model_dir, reference):
    prompts, expected = reference
    llm = LLM(model_dir, kv_cache_memory=1 << 24, enable_prefix_caching=True, max_num_seqs=1)
    outputs = llm.generate(prompts, GREEDY)
    assert token_ids(outputs) == expected
    stats = llm.engine.stats()
    assert stats.prefix_cache_hits >= 7 * 32  # the 40-token prefix spans two full 16-token blocks
    assert all(o.num_cached_tokens >= 32 for o in outputs[1:])


def test_tiny_chunks_give_identical_outputs(model_dir, reference):
    prompts, expected = reference
    llm = LLM(model_dir, kv_cache_memory=1 << 24, max_num_batched_tokens=5, enable_prefix_caching=False)
    assert token_ids(llm.generate(prompts, GREEDY)) == expected


def test_preemption_under_tiny_cache_gives_identical_outputs(model_dir, reference):
    prompts, expected = reference
    llm = LLM(model_dir, num_kv_blocks=32, block_size=4, max_model_len=128, enable_prefix_caching=False)
    assert token_ids(llm.generate(prompts, GREEDY)) == expected
    assert llm.engine.stats().num_preemptions > 0
    assert llm.engine.stats().num_free_blocks == 32


def test_prompt_alone_equals_prompt_in_batch_of_32(qwen3_llm):
    prompts = random_prompts(32, seed=3)
    batch = token_ids(qwen3_llm.generate(prompts, GREEDY))
    for i in (0, 17, 31):
        assert token_ids(qwen3_llm.generate([prompts[i]], GREEDY))[0] == batch[i]


def test_n_completions_share_prompt_blocks(model_dir):
    llm = LLM(model_dir, kv_cache_memory=1 << 24, enable_prefix_caching=False)
    prompt = random_prompts(1, seed=4, lo=50, hi=51)[0]
    single = llm.generate([prompt], GREEDY)[0].outputs[0].token_ids
    before = llm.engine.stats().num_prompt_tokens
    out = llm.generate([prompt], GREEDY.clone(n=4))[0]
    computed = llm.engine.stats().num_prompt_tokens - before
    assert [c.index for c in out.outputs] == [0, 1, 2, 3]
    assert all(c.token_ids == single for c in out.outputs)
    assert computed < 2 * len(prompt)  # 3 siblings reused the first one's 3 full blocks


def test_seeded_sampling_is_reproducible_and_batch_independent(qwen3_llm):
    prompts = random_prompts(6, seed=5)
    params = SamplingParams(temperature=1.0, top_p=0.9, top_k=50, max_tokens=10, seed=1234, ignore_eos=True)
    alone = token_ids(qwen3_llm.generate(prompts[:1], params))[0]
    in_batch = token_ids(qwen3_llm.generate(prompts, params))[0]
    assert alone == in_batch
    other = token_ids(qwen3_llm.generate(prompts[:1], params.clone(seed=99)))[0]
    assert other != alone
    siblings = qwen3_llm.generate(prompts[:1], params.clone(n=3))[0].outputs
    assert siblings[0].token_ids == alone[0] and len({tuple(c.token_ids) for c in siblings}) > 1


def test_stop_string_spanning_tokens_is_cut_and_never_leaks(qwen3_llm):
    prompt = random_prompts(1, seed=6)[0]
    full = qwen3_llm.generate([prompt], GREEDY.clone(max_tokens=30))[0].outputs[0].text
    assert len(full) > 12
    stop = full[6:11]
    streamed = []
    engine = qwen3_llm.engine
    engine.add_request("stop-test", prompt, GREEDY.clone(max_tokens=30, stop=[stop]))
    while engine.has_unfinished_requests():
        for out in engine.step():
            streamed.append(out.outputs[0].text)
    final = out.outputs[0]
    assert final.finish_reason == "stop" and final.stop_reason == stop
    assert final.text == full[: full.index(stop)]
    assert all(stop not in text and final.text.startswith(text) for text in streamed)


def test_stop_token_ids_and_min_tokens(qwen3_llm):
    prompt = random_prompts(1, seed=7)[0]
    tokens = qwen3_llm.generate([prompt], GREEDY.clone(max_tokens=20))[0].outputs[0].token_ids
    stop_id = tokens[2]
    first = tokens.index(stop_id)
    out = qwen3_llm.generate([prompt], GREEDY.clone(max_tokens=20, stop_token_ids=[stop_id]))[0].outputs[0]
    assert out.token_ids == tokens[: first + 1] and out.finish_reason == "stop" and out.stop_reason == stop_id
    late = qwen3_llm.generate([prompt], GREEDY.clone(max_tokens=20, stop_token_ids=[stop_id], min_tokens=first + 2))[0]
    assert len(late.outputs[0].token_ids) >= first + 2
    assert stop_id not in late.outputs[0].token_ids[: first + 2]  # not drawn before min_tokens (as vLLM, HF)
    eager = GREEDY.clone(max_tokens=20, stop_token_ids=[stop_id], min_tokens=4, logit_bias={stop_id: 100.0})
    out = qwen3_llm.generate([prompt], eager)[0].outputs[0]
    assert out.token_ids[4] == stop_id and stop_id not in out.token_ids[:4] and len(out.token_ids) == 5


def test_the_stop_tokens_text_is_left_out_unless_asked_for(qwen3_llm):
    """As vLLM: the EOS or stop token id that ends a completion stays in token_ids, not in the text, unless
    include_stop_str_in_output; alike when the text is decoded at the end and when it is read as it grows
    (a stop string makes it incremental)."""
    tokenizer = qwen3_llm.get_tokenizer()
    prompt = random_prompts(1, seed=7)[0]
    tokens = qwen3_llm.generate([prompt], GREEDY.clone(max_tokens=20))[0].outputs[0].token_ids
    stop_id = tokens[3]
    params = GREEDY.clone(max_tokens=20, stop_token_ids=[stop_id], skip_special_tokens=False)
    for extra in ({}, {"stop": ["\x00never"]}):
        out = qwen3_llm.generate([prompt], params.clone(**extra))[0].outputs[0]
        assert out.token_ids[-1] == stop_id and out.stop_reason == stop_id
        assert out.text == tokenizer.decode(out.token_ids[:-1])
        kept = qwen3_llm.generate([prompt], params.clone(include_stop_str_in_output=True, **extra))[0].outputs[0]
        assert kept.token_ids == out.token_ids and kept.text == tokenizer.decode(kept.token_ids)
        assert kept.text != out.text
    deltas = _run(qwen3_llm.engine, "stop-token", prompt, params.clone(output_kind=RequestOutputKind.DELTA))
    parts = [c for d in deltas for c in d.outputs]
    assert sum((c.token_ids for c in parts), []) == out.token_ids and "".join(c.text for c in parts) == out.text


def test_max_tokens_and_context_limit(model_dir):
    llm = LLM(model_dir, kv_cache_memory=1 << 24, max_model_len=40)
    out = llm.generate([list(range(3, 33))], SamplingParams(temperature=0, max_tokens=None, ignore_eos=True))[0]
    assert len(out.outputs[0].token_ids) == 10 and out.outputs[0].finish_reason == "length"
    with pytest.raises(ValueError, match="max_model_len"):
        llm.generate([list(range(3, 43))], GREEDY)


def test_abort_returns_pool_to_baseline(qwen3_llm):
    engine = qwen3_llm.engine
    baseline = engine.stats().num_free_blocks
    for i, prompt in enumerate(random_prompts(4, seed=8, lo=30, hi=60)):
        engine.add_request(f"abort-{i}", prompt, GREEDY.clone(max_tokens=50))
    engine.step()
    engine.step()
    assert engine.stats().num_free_blocks < baseline
    for i in range(4):
        engine.abort(f"abort-{i}")
    assert engine.stats().num_free_blocks == baseline and not engine.has_unfinished_requests()


def test_greedy_logprobs_rank_first(qwen3_llm):
    out = qwen3_llm.generate([[5, 6, 7]], GREEDY.clone(logprobs=3))[0].outputs[0]
    assert len(out.logprobs) == len(out.token_ids)
    for lp in out.logprobs:
        assert lp.rank == 1 and len(lp.top) == 3 and max(lp.top.values()) == pytest.approx(lp.logprob)


def test_bad_prompts_are_refused(qwen3_llm):
    with pytest.raises(ValueError, match="outside the vocabulary"):
        qwen3_llm.generate([[1, 10**9]], GREEDY)
    with pytest.raises(ValueError, match="empty"):
        qwen3_llm.generate([[]], GREEDY)
    for bad in (True, 1.5, "a"):  # not "outside the vocabulary": not an id at all
        with pytest.raises(ValueError, match=f"prompt token ids must be integers, got {bad!r}"):
            qwen3_llm.generate([[1, bad]], GREEDY)
    assert not qwen3_llm.engine.has_unfinished_requests()


def test_streamed_text_equals_final_text(qwen3_llm):
    prompt = random_prompts(1, seed=9)[0]
    final = qwen3_llm.generate([prompt], GREEDY.clone(max_tokens=25))[0].outputs[0]
    assert final.text == qwen3_llm.tokenizer.decode(final.token_ids, skip_special_tokens=True)
    engine, texts = qwen3_llm.engine, []
    engine.add_request("stream-test", prompt, GREEDY.clone(max_tokens=25), stream=True)
    while engine.has_unfinished_requests():
        texts += [o.outputs[0].text for o in engine.step()]
    assert texts[-1] == final.text
    assert all(final.text.startswith(t) and "\ufffd" not in t[-1:] for t in texts[:-1])


def test_final_only_requests_report_once(qwen3_llm):
    engine, reports = qwen3_llm.engine, []
    engine.add_request("final-only", [5, 6, 7], GREEDY.clone(max_tokens=6, output_kind=RequestOutputKind.FINAL_ONLY))
    while engine.has_unfinished_requests():
        reports += engine.step()
    assert len(reports) == 1 and reports[0].finished and len(reports[0].outputs[0].token_ids) == 6


def test_a_kv_cache_smaller_than_max_model_len_refuses_to_start(model_dir):
    """Otherwise the engine starts and then refuses every request without max_tokens (as vLLM, refuse early)."""
    with pytest.raises(ValueError) as info:
        LLM(model_dir, num_kv_blocks=32, block_size=4)  # 128 tokens for max_model_len 512
    message = str(info.value)
    assert "128 tokens" in message and "max_model_len (512)" in message
    assert all(flag in message for flag in ("--max-model-len", "--gpu-memory-utilization", "--num-kv-blocks"))
    assert LLM(model_dir, num_kv_blocks=32, block_size=4, max_model_len=128).engine.info.max_model_len == 128


def test_engine_checks_kv_capacity_whatever_its_runner():
    from model_optimizer.runtime.config import EngineConfig
    from model_optimizer.runtime.engine.engine import LLMEngine, ModelInfo

    info = ModelInfo(vocab_size=100, max_model_len=100, eos_token_ids=frozenset(), num_kv_blocks=6)
    with pytest.raises(ValueError, match=r"holds 96 tokens .*max_model_len \(100\).*--num-kv-blocks 7"):
        LLMEngine(EngineConfig(block_size=16), runner=None, tokenizer=None, info=info)  # type: ignore[arg-type]
    info.num_kv_blocks = 7
    assert LLMEngine(EngineConfig(block_size=16), runner=None, tokenizer=None, info=info).kv_cache.num_blocks == 7  # type: ignore[arg-type]


def test_long_prefills_served_after_short_ones_give_identical_outputs(model_dir, reference):
    prompts, expected = reference
    shorts = random_prompts(4, seed=5, lo=2, hi=6)
    mixed = [p for pair in zip(prompts, shorts + [None] * len(prompts)) for p in pair if p is not None]
    llm = LLM(
        model_dir,
        kv_cache_memory=1 << 24,
        max_num_batched_tokens=32,
        long_prefill_token_threshold=8,
        max_num_partial_prefills=2,
        enable_prefix_caching=False,
    )
    outputs = token_ids(llm.generate(mixed, GREEDY))
    assert [o for o, p in zip(outputs, mixed) if p in prompts] == expected
    assert llm.engine.stats().num_free_blocks == llm.engine.stats().num_blocks


def test_long_prefill_settings_are_validated():
    from model_optimizer.runtime.config import EngineConfig

    with pytest.raises(ValueError, match="max_num_partial_prefills must be a positive integer"):
        EngineConfig(max_num_partial_prefills=0)
    with pytest.raises(ValueError, match="long_prefill_token_threshold must be an integer >= 0"):
        EngineConfig(long_prefill_token_threshold=-1)


def _run(engine, request_id, prompt, params):
    engine.add_request(request_id, prompt, params)
    reports = []
    while engine.has_unfinished_requests():
        reports += [o for o in engine.step() if o.request_id == request_id]
    return reports


def test_delta_outputs_add_up_to_the_cumulative_one(qwen3_llm):
    prompt = random_prompts(1, seed=11)[0]
    params = SamplingParams(n=2, temperature=0.8, seed=3, max_tokens=12, logprobs=2, ignore_eos=True)
    final = qwen3_llm.generate([prompt], params)[0]
    deltas = _run(qwen3_llm.engine, "delta", prompt, params.clone(output_kind=RequestOutputKind.DELTA))
    assert len(deltas) > 2 and deltas[-1].finished and not any(d.finished for d in deltas[:-1])
    for expected in final.outputs:
        parts = [c for d in deltas for c in d.outputs if c.index == expected.index]
        assert sum((c.token_ids for c in parts), []) == expected.token_ids
        assert "".join(c.text for c in parts) == expected.text
        assert sum((c.logprobs for c in parts), []) == expected.logprobs
        assert [c.finish_reason for c in parts] == [None] * (len(parts) - 1) + ["length"]
        assert all(c.token_ids for c in parts)  # a completion appears only when it has something new


def test_the_n_completions_of_a_seeded_request_repeat_no_other_seed(qwen3_llm):
    """Completion 0 keeps the request's seed (it equals the n = 1 request); the others draw from (seed,
    index), so requests with neighbouring seeds share no sample (seed + index made them overlap)."""
    prompt = random_prompts(1, seed=13)[0]
    params = SamplingParams(temperature=1.0, max_tokens=16, ignore_eos=True)
    pair = [c.token_ids for c in qwen3_llm.generate([prompt], params.clone(n=2, seed=0))[0].outputs]
    alone = [qwen3_llm.generate([prompt], params.clone(seed=s))[0].outputs[0].token_ids for s in (0, 1, 2)]
    assert pair[0] == alone[0] and pair[1] not in alone[1:]
    assert pair[1] == qwen3_llm.generate([prompt], params.clone(n=2, seed=0))[0].outputs[1].token_ids


def test_delta_outputs_hold_back_a_possible_stop_string(qwen3_llm):
    prompt = random_prompts(1, seed=12)[0]
    full = qwen3_llm.generate([prompt], GREEDY.clone(max_tokens=20))[0].outputs[0].text
    stop = full[8:11]
    params = GREEDY.clone(max_tokens=20, stop=[stop], output_kind=RequestOutputKind.DELTA)
    deltas = _run(qwen3_llm.engine, "delta-stop", prompt, params)
    assert "".join(d.outputs[0].text for d in deltas) == full[: full.index(stop)]
    assert deltas[-1].outputs[0].finish_reason == "stop" and deltas[-1].outputs[0].stop_reason == stop


def test_abort_returns_what_the_request_had(qwen3_llm):
    engine = qwen3_llm.engine
    engine.add_request("to-abort", [5, 6, 7], GREEDY.clone(max_tokens=30, ignore_eos=True), stream=True)
    seen = []
    while len(seen) < 3:
        seen += engine.step()
    last = engine.abort("to-abort")
    assert last is not None and last.finished and last.outputs[0].finish_reason == "abort"
    assert last.outputs[0].token_ids[: len(seen[-1].outputs[0].token_ids)] == seen[-1].outputs[0].token_ids
    assert engine.abort("to-abort") is None
    while engine.has_unfinished_requests():
        assert engine.step() == []


def test_a_request_id_that_names_another_requests_completion_is_refused(qwen3_llm):
    """`x` with n=2 runs its completions as `0:x` and `1:x`: a request `0:x` beside them is refused (and the
    other way round), and both ids are free again once the first request has gone."""
    engine = qwen3_llm.engine
    params = GREEDY.clone(max_tokens=4)
    engine.add_request("x", [5, 6, 7], params.clone(n=2))
    with pytest.raises(ValueError, match="'1:x' is already in use"):
        engine.add_request("1:x", [5, 6], params)
    engine.add_request("2:x", [5, 6], params)  # x has no third completion
    with pytest.raises(ValueError, match="'0:x' is already in use"):
        engine.add_request("0:x", [5, 6], params.clone(n=2))  # whatever its own n
    engine.add_request("0:y", [5, 6], params)
    with pytest.raises(ValueError, match="'0:y' is already in use"):
        engine.add_request("y", [5, 6], params.clone(n=3))
    engine.add_request("0:z", [5, 6], params.clone(n=2))
    with pytest.raises(ValueError, match="'0:z' is already in use"):
        engine.add_request("z", [5, 6], params.clone(n=2))  # an abort of 0:z could not tell them apart
    engine.add_request("y", [5, 6], params)  # one completion runs as `y`
    finished = {}
    while engine.has_unfinished_requests():
        finished.update((out.request_id, out) for out in engine.step() if out.finished)
    assert sorted(finished) == ["0:y", "0:z", "2:x", "x", "y"] and len(finished["x"].outputs) == 2
    engine.add_request("1:x", [5, 6], params)
    engine.abort("1:x")


def test_n_completions_preempted_resume_from_their_own_tokens(model_dir):
    """A preempted completion of n shares only its sibling's prompt blocks when it comes back: past the
    prompt, the sibling's blocks hold the sibling's own output. Every completion's tokens and logprobs
    equal those of a run with room for all of them."""
    params = SamplingParams(n=3, temperature=1.0, seed=5, max_tokens=40, ignore_eos=True, logprobs=0)
    prompt = random_prompts(1, seed=6, lo=20, hi=21)[0]
    roomy = LLM(model_dir, kv_cache_memory=1 << 24, enable_prefix_caching=False)
    tight = LLM(model_dir, num_kv_blocks=20, block_size=4, max_model_len=80, enable_prefix_caching=False,
                async_scheduling=False)  # fmt: skip
    expected, got = roomy.generate([prompt], params)[0].outputs, tight.generate([prompt], params)[0].outputs
    assert tight.engine.stats().num_preemptions > 0
    assert [c.token_ids for c in got] == [c.token_ids for c in expected]
    for mine, theirs in zip(got, expected, strict=True):
        assert mine.cumulative_logprob == pytest.approx(theirs.cumulative_logprob, abs=1e-3)
