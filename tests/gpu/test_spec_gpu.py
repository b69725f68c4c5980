"""Speculative decoding on a real GPU, CUDA graphs on: greedy tokens identical to the engine without it
(float32, so no bf16 tie can flip an argmax between the decode and verify kernels), the uniform verify and
draft catch-up graphs actually replayed (a latent-attention draft's too), and seeded sampling through the
fused sampler the very tokens sampled without speculation, with n-gram proposals and with a draft model."""

from __future__ import annotations

import random

import pytest

from model_optimizer import LLM, SamplingParams

K = 3
GREEDY = SamplingParams(temperature=0, max_tokens=32, ignore_eos=True, logprobs=2)
ENGINE = dict(dtype="float32", gpu_memory_utilization=0.15, max_num_seqs=16)


def prompts() -> list[list[int]]:
    rng = random.Random(5)
    random_ones = [[rng.randrange(3, 1000) for _ in range(rng.randrange(2, 120))] for _ in range(6)]
    return random_ones + [[11, 12, 13, 14] * 8, [400, 500] * 20]


def tokens(outputs) -> list[list[int]]:
    return [o.outputs[0].token_ids for o in outputs]


@pytest.fixture(scope="module")
def reference(tiny_model):
    return tokens(LLM(str(tiny_model("qwen3")), **ENGINE).generate(prompts(), GREEDY))


def _count_replays(runner) -> list:
    replays = []
    run = runner.run

    def counting(inputs):
        replays.append(inputs.num_seqs)
        return run(inputs)

    runner.run = counting
    return replays


DRAFTS = {"self_draft": "qwen3", "other_draft": "qwen3_hd64", "latent_draft": "deepseek_v2"}
"""The draft of each method but n-gram; deepseek_v2's cache holds one latent row per token."""


@pytest.mark.parametrize("method", ["ngram", *DRAFTS])
def test_greedy_tokens_identical_with_graphs(tiny_model, reference, method):
    target = str(tiny_model("qwen3"))
    spec = {"num_speculative_tokens": K, "adaptive": False}
    spec |= {"method": "ngram"} if method == "ngram" else {"model": str(tiny_model(DRAFTS[method]))}
    llm = LLM(target, speculative_config=spec, **ENGINE)
    verify = _count_replays(llm.runner.verify_runner)
    drafts = [_count_replays(r) for r in llm.runner.drafter.padded_runners] if llm.runner.drafter else []
    assert tokens(llm.generate(prompts(), GREEDY)) == reference
    stats = llm.engine.stats()
    assert stats.spec_num_drafts > 0
    if method != "ngram":  # every request proposes k: uniform steps replay the graphs
        assert verify and all(drafts)
    if method == "self_draft":
        assert stats.spec_num_accepted_tokens == stats.spec_num_draft_tokens


def test_graphed_and_eager_speculation_agree(tiny_model):
    target = str(tiny_model("qwen3"))
    spec = {"model": target, "num_speculative_tokens": K, "adaptive": False}
    eager = LLM(target, speculative_config=spec, enforce_eager=True, **ENGINE)
    graphed = LLM(target, speculative_config=spec, **ENGINE)
    assert tokens(eager.generate(prompts(), GREEDY)) == tokens(graphed.generate(prompts(), GREEDY))


def test_seeded_sampling_is_reproducible(tiny_model):
    """Point-mass proposals (n-gram, and a draft's for a seeded request, drawn with the fused sampler's noise
    for that position) keep each position's plain draw: the very tokens sampled without speculation."""
    target = str(tiny_model("qwen3"))
    params = SamplingParams(temperature=0.8, seed=3, max_tokens=24, ignore_eos=True, n=2)
    plain = [[c.token_ids for c in o.outputs] for o in LLM(target, **ENGINE).generate(prompts(), params)]
    for spec in ({"method": "ngram", "num_speculative_tokens": K}, {"model": target, "num_speculative_tokens": K}):
        llm = LLM(target, speculative_config={**spec, "adaptive": False}, **ENGINE)
        first = [[c.token_ids for c in o.outputs] for o in llm.generate(prompts(), params)]
        assert first == [[c.token_ids for c in o.outputs] for o in llm.generate(prompts(), params)] == plain
        stats = llm.engine.stats()
        if "model" in spec:  # the target as its own draft, drawing with the target's noise: all kept
            assert stats.spec_num_accepted_tokens == stats.spec_num_draft_tokens > 0
