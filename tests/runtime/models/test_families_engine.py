"""The mixture-of-experts, GLM-4, Phi-3, Gemma 3, Gemma 2, DeepSeek and gpt-oss families through the engine's hard paths,
against transformers.

test_matches_transformers.py covers each family with roomy settings; here the same greedy outputs
must come back when prompts share a cached prefix, and when a tiny token budget cuts every prompt
into chunks while a tiny KV cache forces preemption and recompute (a sliding window and layers of
different kinds must survive both).
"""

from __future__ import annotations

import random

import pytest
import torch

from model_optimizer import LLM, SamplingParams

FAMILIES = ["qwen3_moe", "qwen3_moe_step2", "mixtral", "glm4", "glm4_moe", "gemma3", "gemma2"] + [
    "phi3",
    "phi3_partial",
    "deepseek_v2",
    "deepseek_v2_group",
    "deepseek_v3",
    "gpt_oss",
]
NUM_NEW = 16
GREEDY = SamplingParams(temperature=0, max_tokens=NUM_NEW)
_expected: dict[str, tuple[list[list[int]], list[list[int]]]] = {}


def shared_prefix_prompts(seed: int) -> list[list[int]]:
    """Six prompts of one 20-token prefix (five full blocks of 4) and tails of 3 to 30 tokens."""
    rng = random.Random(seed)
    prefix = [rng.randrange(3, 1000) for _ in range(20)]
    return [prefix + [rng.randrange(3, 1000) for _ in range(n)] for n in (3, 11, 30, 7, 19, 25)]


def reference(tiny_model, name: str) -> tuple[list[list[int]], list[list[int]]]:
    """(prompts, transformers' greedy continuations), in float32 with its eager attention and experts."""
    if name not in _expected:
        from transformers import AutoModelForCausalLM

        model_dir = tiny_model(name)
        moe = "moe" in name or name in ("mixtral", "gpt_oss") or "deepseek" in name
        kwargs = {"experts_implementation": "eager"} if moe else {}
        model = AutoModelForCausalLM.from_pretrained(
            str(model_dir), dtype=torch.float32, attn_implementation="eager", **kwargs
        ).eval()
        prompts = shared_prefix_prompts(seed=len(name))
        outputs = []
        for prompt in prompts:
            out = model.generate(torch.tensor([prompt]), max_new_tokens=NUM_NEW, do_sample=False, pad_token_id=0)
            outputs.append(out[0, len(prompt) :].tolist())
        _expected[name] = (prompts, outputs)
    return _expected[name]


def token_ids(outputs) -> list[list[int]]:
    return [o.outputs[0].token_ids for o in outputs]


@pytest.mark.parametrize("name", FAMILIES)
def test_prefix_cache_hits_give_transformers_outputs(tiny_model, name):
    prompts, expected = reference(tiny_model, name)
    llm = LLM(str(tiny_model(name)), dtype="float32", kv_cache_memory=1 << 24, block_size=4, max_num_seqs=1)
    outputs = llm.generate(prompts, GREEDY)
    assert token_ids(outputs) == expected
    assert all(o.num_cached_tokens >= 20 for o in outputs[1:])  # the prefix came from the cache
    assert llm.engine.stats().prefix_cache_hits >= 5 * 20


@pytest.mark.parametrize("name", FAMILIES)
def test_chunked_prefill_and_preemption_give_transformers_outputs(tiny_model, name):
    prompts, expected = reference(tiny_model, name)
    llm = LLM(
        str(tiny_model(name)),
        dtype="float32",
        num_kv_blocks=36,
        block_size=4,
        max_model_len=128,
        max_num_batched_tokens=7,
        enable_prefix_caching=False,
    )
    assert token_ids(llm.generate(prompts, GREEDY)) == expected
    stats = llm.engine.stats()
    assert stats.num_preemptions > 0
    assert stats.num_free_blocks == 36
