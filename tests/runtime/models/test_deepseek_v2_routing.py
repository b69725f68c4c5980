"""DeepSeek-V2's routing settings through the engine against transformers 5 on the same weights.

transformers' DeepseekV2 reads no `norm_topk_prob` (its router always multiplies the top-k weights by
`routed_scaling_factor`), where DeepSeek's own code renormalizes instead; we follow transformers, so a
checkpoint that sets it gives transformers' logprobs, with either `topk_method`.
"""

from __future__ import annotations

import shutil

import pytest

from model_optimizer import LLM, SamplingParams
from tests.runtime.models.test_matches_transformers import NUM_NEW, TOP_K, assert_matches_transformers, prompts
from tests.tiny_checkpoints import edit_config


def _variant(tiny_model, tmp_path, **settings):
    """A copy of the tiny DeepSeek-V2 (8 experts, top 2, routed_scaling_factor 1.5) with `settings` in config.json."""
    folder = tmp_path / "deepseek_v2"
    shutil.copytree(tiny_model("deepseek_v2"), folder)
    edit_config(folder, **settings)
    return folder


@pytest.mark.parametrize(
    "settings",
    [
        dict(norm_topk_prob=True, topk_method="greedy"),
        dict(norm_topk_prob=True, topk_method="group_limited_greedy", n_group=4, topk_group=2),
        dict(norm_topk_prob=False, topk_method="group_limited_greedy", n_group=4, topk_group=2),
    ],
    ids=["normed_greedy", "normed_groups", "plain_groups"],
)
def test_v2_routing_settings_match_transformers(tiny_model, tmp_path, settings):
    folder = _variant(tiny_model, tmp_path, routed_scaling_factor=2.5, **settings)
    llm = LLM(str(folder), dtype="float32", kv_cache_memory=1 << 24, block_size=16)
    batch = prompts(llm.runner.vocab_size, seed=11)[:3]
    ours = llm.generate(batch, SamplingParams(temperature=0, max_tokens=NUM_NEW, logprobs=TOP_K))
    assert_matches_transformers(folder, batch, ours)
