"""LLM.reset_prefix_cache on a GPU engine with CUDA graphs: the next identical prompts compute their prefixes
again (no cached tokens) and give the same tokens, through the same graphs."""

from __future__ import annotations

from model_optimizer import LLM, SamplingParams

GREEDY = SamplingParams(temperature=0, max_tokens=16, ignore_eos=True)


def test_a_reset_cache_recomputes_prefixes_with_the_same_tokens(tiny_model):
    llm = LLM(str(tiny_model("qwen3")), dtype="bfloat16", gpu_memory_utilization=0.2, enable_prefix_caching=True)
    prompts = [[7 + i] * 64 + list(range(3, 40)) for i in range(4)]
    first = llm.generate(prompts, GREEDY)
    cached = llm.generate(prompts, GREEDY)
    assert all(o.num_cached_tokens > 0 for o in cached)
    assert llm.reset_prefix_cache()
    again = llm.generate(prompts, GREEDY)
    assert [o.num_cached_tokens for o in again] == [0] * len(prompts)
    assert [o.outputs[0].token_ids for o in again] == [o.outputs[0].token_ids for o in first]
