"""A model that produces NaN: the request whose logits are not finite fails alone, with finish_reason
'error' and a message; the rest of its batch is untouched, and nothing it computed is served from the
prefix cache to a later request (tiny Llama with a NaN embedding row, on the CPU)."""

from __future__ import annotations

import shutil

import pytest

from model_optimizer import LLM, SamplingParams
from model_optimizer.runtime.engine.request import NONFINITE_ERROR

BAD_TOKEN = 777
GREEDY = SamplingParams(temperature=0, max_tokens=6, ignore_eos=True)
PREFIX = [5 + (i * 37) % 900 for i in range(40)]  # two full 16-token blocks and a partial one
POISONED = PREFIX + [BAD_TOKEN, 11, 12]
CLEAN = PREFIX + [21, 22, 23, 24]
OTHER = [300 + i for i in range(20)]


@pytest.fixture(scope="module")
def nan_model(tiny_model, tmp_path_factory):
    """The tiny Llama (untied embeddings, so the lm head stays finite) with row BAD_TOKEN of its
    embedding set to NaN: any prompt holding that token gives NaN hidden states, the rest is clean."""
    import torch
    from safetensors.torch import load_file, save_file

    out = tmp_path_factory.mktemp("nan-model") / "llama3-nan"
    shutil.copytree(tiny_model("llama3"), out)
    weights = load_file(out / "model.safetensors")
    name = next(n for n in weights if n.endswith("embed_tokens.weight"))
    weights[name][BAD_TOKEN] = float("nan")
    assert torch.isfinite(weights["lm_head.weight"]).all()
    save_file(weights, out / "model.safetensors", metadata={"format": "pt"})
    return str(out)


def ids(output) -> list[list[int]]:
    return [c.token_ids for c in output.outputs]


@pytest.mark.parametrize("async_scheduling", [True, False], ids=["async", "sync"])
def test_nan_request_fails_alone_and_never_poisons_the_prefix_cache(nan_model, async_scheduling):
    expected = LLM(nan_model, kv_cache_memory=1 << 24, async_scheduling=async_scheduling).generate(
        [CLEAN, OTHER], GREEDY
    )
    llm = LLM(nan_model, kv_cache_memory=1 << 24, async_scheduling=async_scheduling)
    poisoned, other = llm.generate([POISONED, OTHER], GREEDY)
    assert [c.finish_reason for c in poisoned.outputs] == ["error"]
    assert poisoned.error == NONFINITE_ERROR and poisoned.finished
    assert other.error is None and ids(other) == ids(expected[1])  # the same batch goes on unaffected
    stats = llm.engine.stats()
    assert stats.num_free_blocks == stats.num_blocks  # its blocks are freed
    again = llm.generate([POISONED], GREEDY)[0]
    assert again.num_cached_tokens == 0 and again.outputs[0].finish_reason == "error"  # nothing of it was cached
    clean = llm.generate([CLEAN], GREEDY)[0]
    assert clean.error is None and ids(clean) == ids(expected[0])


def test_all_n_completions_fail_and_other_sampling_paths_survive_nan(nan_model):
    """n > 1 siblings share the prompt: all fail. Logprobs and penalties (the torch sampling path that
    reads the token history) must not trip over the failed row."""
    llm = LLM(nan_model, kv_cache_memory=1 << 24)
    params = [
        SamplingParams(temperature=0.8, n=3, seed=1, max_tokens=4, ignore_eos=True),
        SamplingParams(temperature=0, logprobs=2, max_tokens=4, ignore_eos=True),
        SamplingParams(temperature=0, presence_penalty=1.0, repetition_penalty=1.2, max_tokens=4, ignore_eos=True),
        GREEDY,
    ]
    outputs = llm.generate([POISONED, POISONED, POISONED, OTHER], params)
    for output in outputs[:3]:
        assert output.error == NONFINITE_ERROR
        assert all(c.finish_reason == "error" for c in output.outputs)
    assert len(outputs[0].outputs) == 3
    assert outputs[3].error is None and len(outputs[3].outputs[0].token_ids) == GREEDY.max_tokens
    assert llm.engine.stats().num_free_blocks == llm.engine.stats().num_blocks


def test_a_prefix_hit_then_nan_fails_and_leaves_the_clean_request_as_it_was(nan_model):
    """The poisoned request starts from cached clean blocks and turns NaN at its last prompt token."""
    llm = LLM(nan_model, kv_cache_memory=1 << 24)
    first = llm.generate([CLEAN], GREEDY)[0]
    assert first.error is None
    failed = llm.generate([CLEAN + [BAD_TOKEN]], GREEDY)[0]
    assert failed.outputs[0].finish_reason == "error" and failed.outputs[0].token_ids == []
    assert failed.num_cached_tokens == 32  # the clean prefix came from the cache ...
    again = llm.generate([CLEAN], GREEDY)[0]
    assert ids(again) == ids(first)  # ... and what the failed request computed did not poison it
