"""Speculative decoding as a vLLM user drives it, one test per problem found in review: each asserts what a
user sees (outputs, errors, counters, the engine's state), on tiny real checkpoints with the real LLM class."""

from __future__ import annotations

import pytest

from model_optimizer import LLM, SamplingParams

K = 3
CPU = dict(kv_cache_memory=1 << 24)
PROMPTS = [[7, 8, 9, 10] * 6, [100, 200] * 9 + [300], [5, 23, 41, 77, 3]]
GREEDY = SamplingParams(temperature=0, max_tokens=20, ignore_eos=True)


def draft(path) -> dict:
    return {"model": str(path), "num_speculative_tokens": K, "adaptive": False}


def token_ids(outputs) -> list[list[list[int]]]:
    return [[c.token_ids for c in o.outputs] for o in outputs]


@pytest.fixture(scope="module")
def target(tiny_model):
    return tiny_model("qwen3")


@pytest.fixture(scope="module")
def reference(target):
    return token_ids(LLM(str(target), **CPU).generate(PROMPTS, GREEDY, use_tqdm=False))


def test_a_latent_attention_draft_model_starts_and_keeps_greedy_output(target, tiny_model, reference):
    """A DeepSeek-V2 draft (multi-head latent attention: one latent row per token in its cache) failed at
    start-up with 'a latent cache must be (1, ...), got (2, ...)': the draft's cache took the K/V layout."""
    llm = LLM(str(target), speculative_config=draft(tiny_model("deepseek_v2")), **CPU)
    assert token_ids(llm.generate(PROMPTS, GREEDY, use_tqdm=False)) == reference
    assert llm.engine.stats().spec_num_drafts > 0


def test_a_hub_id_names_the_draft_model_as_it_names_the_target(target, reference, tmp_path, monkeypatch):
    """vLLM takes a Hugging Face Hub id for the draft as for the target; here the target resolved but the draft
    was refused ('draft model folder acme/draft has no config.json'). Offline, from a cache in the hub's layout."""
    import shutil

    from huggingface_hub import constants

    repo = tmp_path / "hub" / "models--acme--draft"
    shutil.copytree(target, repo / "snapshots" / ("c" * 40))
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text("c" * 40)
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(tmp_path / "hub"))
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    llm = LLM(str(target), speculative_config=draft("acme/draft"), **CPU)
    assert token_ids(llm.generate(PROMPTS, GREEDY, use_tqdm=False)) == reference
    stats = llm.engine.stats()
    assert stats.spec_num_accepted_tokens == stats.spec_num_draft_tokens > 0  # the target as its own draft
    with pytest.raises(FileNotFoundError, match="acme/missing is not in the Hugging Face cache"):
        LLM(str(target), speculative_config=draft("acme/missing"), **CPU)


SEEDED = SamplingParams(n=2, temperature=0.9, top_p=0.95, seed=11, max_tokens=20, ignore_eos=True)


@pytest.fixture(scope="module")
def seeded_reference(target):
    return token_ids(LLM(str(target), **CPU).generate(PROMPTS, SEEDED, use_tqdm=False))


def test_seeded_sampling_with_a_draft_model_repeats_whatever_the_policy_decides(target, tiny_model, seeded_reference):
    """The same seeded request twice on one engine with a sampling draft model and the default (adaptive)
    policy came back different: the first call explored speculation, the second ran plain, and a seeded
    request's tokens depended on which steps verified proposals. A seeded request now yields the tokens of a
    run without speculation, as with n-gram proposals: run to run, whatever the policy measures."""
    spec = {"model": str(tiny_model("qwen3_hd64")), "num_speculative_tokens": K}  # adaptive, the default
    llm = LLM(str(target), speculative_config=spec, **CPU)
    for _ in range(3):
        assert token_ids(llm.generate(PROMPTS, SEEDED, use_tqdm=False)) == seeded_reference
    assert llm.engine.stats().spec_num_drafts > 0


def test_a_seeded_request_keeps_the_proposals_of_a_draft_that_is_the_target(target, seeded_reference):
    """The draft draws a seeded request's proposals with the noise the target draws those positions with: a
    draft equal to the target has every proposal kept, and the tokens are a plain run's."""
    llm = LLM(str(target), speculative_config=draft(target), **CPU)
    assert token_ids(llm.generate(PROMPTS, SEEDED, use_tqdm=False)) == seeded_reference
    stats = llm.engine.stats()
    assert stats.spec_num_accepted_tokens == stats.spec_num_draft_tokens > 0
