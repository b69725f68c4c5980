"""Speculative decoding end to end on tiny real checkpoints: greedy output (and logprobs) identical to the
engine without speculation (itself checked against transformers), under prefix caching, tiny token budgets
(chunked prefill), preemption, n > 1 and synchronous scheduling; seeded sampling reproducible; the
acceptance counters exact where the acceptance is known."""

from __future__ import annotations

import random

import pytest

from model_optimizer import LLM, SamplingParams
from model_optimizer.runtime.spec_decode.config import ACCEPTANCE_ENV

K = 3
CPU = dict(kv_cache_memory=1 << 24)


def prompts() -> list[list[int]]:
    """Random prompts (n-gram proposals rarely match) and repetitive ones (they often do)."""
    rng = random.Random(0)
    random_ones = [[rng.randrange(3, 1000) for _ in range(n)] for n in (5, 23, 41)]
    loops = [[7, 8, 9, 10] * 6, [100, 200] * 9 + [300]]
    return random_ones + loops


def ngram(**extra) -> dict:
    return {"method": "ngram", "num_speculative_tokens": K, "adaptive": False, **extra}


def draft(path, **extra) -> dict:
    return {"model": str(path), "num_speculative_tokens": K, "adaptive": False, **extra}


def tokens(outputs) -> list[list[list[int]]]:
    return [[c.token_ids for c in o.outputs] for o in outputs]


@pytest.fixture(scope="module")
def target(tiny_model):
    return tiny_model("qwen3")


@pytest.fixture(scope="module")
def other_draft(tiny_model):
    """A different random checkpoint with the same vocabulary (1032 tokens)."""
    return tiny_model("qwen3_hd64")


GREEDY = SamplingParams(temperature=0, max_tokens=24, ignore_eos=True, logprobs=3)


@pytest.fixture(scope="module")
def reference(target):
    return LLM(str(target), **CPU).generate(prompts(), GREEDY)


def assert_same(outputs, reference) -> None:
    assert tokens(outputs) == tokens(reference)
    for out, ref in zip(outputs, reference):
        for lp, ref_lp in zip(out.outputs[0].logprobs, ref.outputs[0].logprobs):
            assert lp.rank == ref_lp.rank and set(lp.top) == set(ref_lp.top)
            assert lp.logprob == pytest.approx(ref_lp.logprob, abs=1e-4)


@pytest.mark.parametrize("method", ["ngram", "self_draft", "other_draft"])
def test_greedy_output_and_logprobs_identical(target, other_draft, reference, method):
    spec = {"ngram": ngram(), "self_draft": draft(target), "other_draft": draft(other_draft)}[method]
    llm = LLM(str(target), speculative_config=spec, **CPU)
    assert_same(llm.generate(prompts(), GREEDY), reference)
    stats = llm.engine.stats()
    assert stats.spec_num_drafts > 0
    if method == "self_draft":  # the draft is the target: every proposal is accepted
        assert stats.spec_num_accepted_tokens == stats.spec_num_draft_tokens
    if method == "ngram":  # the repetitive prompts' proposals are partly right
        assert 0 < stats.spec_num_accepted_tokens < stats.spec_num_draft_tokens


@pytest.mark.parametrize("method", ["ngram", "self_draft"])
def test_prefix_caching_and_tiny_budget(target, reference, method):
    """A budget of 8 tokens chunks every prompt and caps the proposals; the second run finds the prompts'
    full blocks in the prefix cache."""
    spec = ngram() if method == "ngram" else draft(target)
    llm = LLM(str(target), speculative_config=spec, max_num_batched_tokens=8, enable_prefix_caching=True, **CPU)
    assert_same(llm.generate(prompts(), GREEDY), reference)
    assert_same(llm.generate(prompts(), GREEDY), reference)
    stats = llm.engine.stats()
    assert stats.prefix_cache_hits >= 16 * 4 and stats.spec_num_drafts > 0


@pytest.mark.parametrize("method", ["ngram", "self_draft"])
def test_preemption(target, reference, method):
    """6 blocks of 16 tokens cannot hold every request at once: some are preempted and recomputed."""
    spec = ngram() if method == "ngram" else draft(target)
    llm = LLM(str(target), speculative_config=spec, num_kv_blocks=6, max_model_len=96, kv_cache_memory=1 << 24)
    assert_same(llm.generate(prompts(), GREEDY), reference)
    stats = llm.engine.stats()
    assert stats.num_preemptions > 0 and stats.spec_num_drafts > 0


@pytest.mark.parametrize("async_scheduling", [True, False])
def test_n_completions_and_seeded_sampling(target, async_scheduling):
    """n = 3 seeded samples: exactly the tokens sampled without speculation, run to run, with n-gram proposals
    (each position draws with the same seeded noise) and with a sampling draft model (whose proposals for a
    seeded request are drawn with that noise too)."""
    params = SamplingParams(n=3, temperature=0.9, top_p=0.95, seed=11, max_tokens=20, ignore_eos=True)
    plain = LLM(str(target), async_scheduling=async_scheduling, **CPU).generate(prompts(), params)
    with_ngram = LLM(str(target), async_scheduling=async_scheduling, speculative_config=ngram(), **CPU)
    assert tokens(with_ngram.generate(prompts(), params)) == tokens(plain)
    with_draft = LLM(str(target), async_scheduling=async_scheduling, speculative_config=draft(target), **CPU)
    first, second = with_draft.generate(prompts(), params), with_draft.generate(prompts(), params)
    assert tokens(first) == tokens(second) == tokens(plain)
    assert all(len(c.token_ids) == 20 for o in first for c in o.outputs)


def test_greedy_matches_transformers(target):
    """Against a reference nobody here wrote: transformers' greedy generate on the same weights."""
    import torch
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(str(target), dtype=torch.float32).eval()
    llm = LLM(str(target), dtype="float32", speculative_config=ngram(), **CPU)
    batch = prompts()
    ours = llm.generate(batch, SamplingParams(temperature=0, max_tokens=16, ignore_eos=True))
    for prompt, out in zip(batch, ours):
        ref = model.generate(torch.tensor([prompt]), max_new_tokens=16, do_sample=False, pad_token_id=0)
        assert out.outputs[0].token_ids == ref[0, len(prompt) :].tolist()
    assert llm.engine.stats().spec_num_accepted_tokens > 0


def test_counters_when_every_proposal_is_accepted(target):
    """The target as its own draft, one request of 13 tokens: a prefill step yields the first token, then
    three steps of 3 accepted proposals and a bonus token each."""
    llm = LLM(str(target), speculative_config=draft(target), **CPU)
    out = llm.generate([[5, 6, 7, 8, 9]], SamplingParams(temperature=0, max_tokens=13, ignore_eos=True))
    stats = llm.engine.stats()
    assert len(out[0].outputs[0].token_ids) == 13
    assert (stats.spec_num_drafts, stats.spec_num_draft_tokens, stats.spec_num_accepted_tokens) == (3, 9, 9)
    assert stats.spec_accepted_per_pos == [3, 3, 3] and stats.spec_mean_acceptance_length == 4.0
    assert stats.num_steps == 4


def test_injected_rejection_keeps_greedy_output(target, other_draft, reference, monkeypatch):
    """The benchmark knob at acceptance 0 rejects every proposal: each step keeps the target's own token,
    so the output is still exact, one token per step, and nothing counts as accepted."""
    monkeypatch.setenv(ACCEPTANCE_ENV, "0")
    llm = LLM(str(target), speculative_config=draft(target), **CPU)
    assert_same(llm.generate(prompts(), GREEDY), reference)
    stats = llm.engine.stats()
    assert stats.spec_num_drafts > 0 and stats.spec_num_accepted_tokens == 0


def test_injected_acceptance_one_keeps_every_proposal(target, other_draft, monkeypatch):
    """At acceptance 1 a draft unrelated to the target has every proposal kept: 1 + k tokens per step."""
    monkeypatch.setenv(ACCEPTANCE_ENV, "1")
    llm = LLM(str(target), speculative_config=draft(other_draft), **CPU)
    llm.generate([[5, 6, 7, 8, 9]], SamplingParams(temperature=0, max_tokens=13, ignore_eos=True))
    stats = llm.engine.stats()
    assert stats.spec_num_accepted_tokens == stats.spec_num_draft_tokens == 9


def test_adaptive_policy_keeps_outputs(target, reference):
    """Whatever the policy decides step by step (speculate or not), greedy output does not change."""
    spec = {"method": "ngram", "num_speculative_tokens": K}
    llm = LLM(str(target), speculative_config=spec, **CPU)
    assert_same(llm.generate(prompts(), GREEDY), reference)


def test_draft_with_another_vocabulary_is_refused(target, tiny_model):
    with pytest.raises(ValueError, match="vocabulary"):
        LLM(str(target), speculative_config=draft(tiny_model("qwen2")), **CPU)  # 1031 tokens, not 1032


def test_missing_draft_folder_is_refused(target, tmp_path):
    with pytest.raises(FileNotFoundError, match="draft model folder .* does not exist"):
        LLM(str(target), speculative_config=draft(tmp_path / "nowhere"), **CPU)
    with pytest.raises(ValueError, match="no config.json"):
        LLM(str(target), speculative_config=draft(tmp_path), **CPU)


def test_padded_uniform_steps_give_the_same_tokens(target, reference):
    """The GPU pads steps where every sequence verifies k proposals (and the draft's catch-ups of 1 + k tokens)
    to a graph bucket; on the CPU those padded runners are put in by hand and run eagerly: same tokens, and
    both the target's and the draft's uniform steps went through them."""
    from model_optimizer.runtime.runner.decode_runner import DecodeRunner

    llm = LLM(str(target), speculative_config=draft(target), **CPU)
    runner, drafter = llm.runner, llm.runner.drafter
    assert runner.verify_runner is None and drafter.padded_runners == []  # the CPU runs every batch unpadded
    seen = []

    def padded(model, query_len: int) -> DecodeRunner:
        decode = DecodeRunner(model, runner.batch, 8, runner.kv_caches[0].shape[3], False, query_len)
        run = decode.run

        def counting_run(inputs):
            seen.append((model is runner.model, query_len, inputs.num_seqs, inputs.num_padded_seqs))
            return run(inputs)

        decode.run = counting_run
        return decode

    runner.decode_runner, runner.verify_runner = padded(runner.model, 1), padded(runner.model, K + 1)
    drafter.padded_runners = [padded(drafter.model, 1), padded(drafter.model, K + 1)]
    assert_same(llm.generate(prompts(), GREEDY), reference)
    assert any(target and q == K + 1 and padded_to > n for target, q, n, padded_to in seen)  # target verify
    assert any(not target and q == K + 1 for target, q, _, _ in seen)  # draft catch-up of 1 + k tokens
    assert any(not target and q == 1 for target, q, _, _ in seen)  # draft decode steps


@pytest.mark.parametrize("method", ["ngram", "self_draft"])
def test_prompt_logprobs_are_those_of_a_run_without_speculation(target, method):
    """Prompt logprobs come from the prefill, which speculation must leave alone; the output too."""
    params = SamplingParams(temperature=0, max_tokens=16, ignore_eos=True, prompt_logprobs=3)
    plain = LLM(str(target), **CPU).generate(prompts(), params)
    spec = ngram() if method == "ngram" else draft(target)
    llm = LLM(str(target), speculative_config=spec, **CPU)
    outputs = llm.generate(prompts(), params)
    assert llm.engine.stats().spec_num_drafts > 0
    assert tokens(outputs) == tokens(plain)
    for out, ref in zip(outputs, plain):
        assert out.prompt_logprobs[0] is None and len(out.prompt_logprobs) == len(ref.prompt_logprobs)
        for got, want in zip(out.prompt_logprobs[1:], ref.prompt_logprobs[1:]):
            assert set(got) == set(want)
            for token_id, lp in want.items():
                assert got[token_id].rank == lp.rank
                assert got[token_id].logprob == pytest.approx(lp.logprob, abs=1e-4)


@pytest.mark.parametrize("method", ["ngram", "self_draft"])
def test_every_verifying_decode_step_has_the_graphed_shape(target, reference, method):
    """Requests reach their end at different steps (different acceptance, max_tokens not a multiple of
    1 + k): a verifying step without prompt tokens must still be one the verify graphs run (1 + k tokens
    in every row), and the output stays the reference's. On the CPU the padded runner is put in by hand."""
    from model_optimizer.runtime.runner.decode_runner import DecodeRunner

    llm = LLM(str(target), speculative_config=ngram() if method == "ngram" else draft(target), **CPU)
    runner = llm.runner
    heads = runner.kv_caches[0].shape[3]
    runner.decode_runner = DecodeRunner(runner.model, runner.batch, 8, heads, False)  # sets the pad sizes
    runner.verify_runner = DecodeRunner(runner.model, runner.batch, 8, heads, False, K + 1)
    steps = []  # per step that verified and computed no prompt: whether the verify runner could run it
    submit = runner.submit

    def recording_submit(step, pending, sample=True):
        out = step.out
        if out.spec_token_ids and len(out.num_scheduled_tokens) > 1:
            prefill = any(n - len(out.spec_token_ids.get(r, ())) > 1 for r, n in out.num_scheduled_tokens.items())
            if not prefill:
                steps.append(runner.verify_runner.can_run(step.inputs))
        return submit(step, pending, sample)

    runner.submit = recording_submit
    assert_same(llm.generate(prompts(), GREEDY), reference)
    assert len(steps) >= 3 and all(steps)


@pytest.mark.parametrize("budget", [None, 7])
def test_greedy_and_seeded_requests_beside_sampled_ones_keep_their_tokens(target, other_draft, reference, budget):
    """A draft's q rows belong to its unseeded sampled requests only (the rejection rule's): a greedy request
    batched with a sampled one was verified as sampled at temperature 0 (token 0), and with a small budget the
    proposals' q lists came out shorter than their proposals (a RuntimeError). Greedy and seeded requests in
    such a batch yield the tokens of a run without speculation."""
    sampled = SamplingParams(temperature=0.8, max_tokens=24, ignore_eos=True)
    seeded = SamplingParams(temperature=0.8, seed=7, max_tokens=24, ignore_eos=True)
    budgeted = {} if budget is None else {"max_num_batched_tokens": budget}
    llm = LLM(str(target), speculative_config=draft(other_draft), **budgeted, **CPU)
    mixed = [p for _ in prompts() for p in (GREEDY, sampled, seeded)]
    outputs = llm.generate([p for p in prompts() for _ in range(3)], mixed, use_tqdm=False)
    assert_same(outputs[::3], reference)
    assert tokens(outputs[2::3]) == tokens(LLM(str(target), **CPU).generate(prompts(), seeded, use_tqdm=False))
    assert all(len(o.outputs[0].token_ids) == 24 for o in outputs[1::3])
    assert llm.engine.stats().spec_num_drafts > 0
