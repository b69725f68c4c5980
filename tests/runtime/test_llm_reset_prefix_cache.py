"""`LLM.reset_prefix_cache()` (vLLM's): after it the same prompt is a cache miss again, on the GPU pool and in
the host tier, its output unchanged; the prefix-cache counters go on; requests still running keep their
cached blocks and the reset says False."""

from __future__ import annotations

import pytest

from model_optimizer import LLM, SamplingParams

GREEDY = SamplingParams(temperature=0, max_tokens=4)
PROMPT = [(i * 37) % 900 + 5 for i in range(24)]  # six blocks of 4
ENGINE_ARGS = dict(dtype="float32", block_size=4, max_model_len=64, max_num_seqs=2)


@pytest.fixture(scope="module")
def llm(tiny_model):
    return LLM(str(tiny_model("qwen3")), num_kv_blocks=32, **ENGINE_ARGS)


def run(llm: LLM, prompt: list[int] = PROMPT) -> tuple[list[int], int]:
    """(greedy tokens, prompt tokens served from the prefix cache) of one prompt."""
    [out] = llm.generate([prompt], GREEDY, use_tqdm=False)
    return out.outputs[0].token_ids, out.num_cached_tokens


def test_the_same_prompt_misses_after_a_reset_and_the_counters_go_on(llm):
    assert llm.reset_prefix_cache()  # whatever earlier tests left
    tokens, cached = run(llm)
    assert cached == 0
    assert run(llm) == (tokens, len(PROMPT) - 4)  # every full block but the one holding the last token
    before = llm.engine.stats()

    assert llm.reset_prefix_cache() is True
    assert llm.engine.stats().prefix_cache_hits == before.prefix_cache_hits  # a reset does not zero them
    assert run(llm) == (tokens, 0)
    after = llm.engine.stats()
    assert after.prefix_cache_hits == before.prefix_cache_hits
    assert after.prefix_cache_queries == before.prefix_cache_queries + len(PROMPT)


def test_a_running_request_keeps_its_cached_blocks_and_the_reset_says_false(llm):
    engine = llm.llm_engine
    llm.reset_prefix_cache()
    engine.add_request("held", PROMPT, SamplingParams(temperature=0, max_tokens=8, ignore_eos=True))
    engine.step()  # its prompt is computed: its full blocks are cached while it runs
    assert engine.has_unfinished_requests()

    assert llm.reset_prefix_cache() is False
    with pytest.raises(ValueError, match="reset_running_requests=True is not supported while requests run"):
        llm.reset_prefix_cache(reset_running_requests=True)
    while engine.has_unfinished_requests():
        engine.step()
    assert run(llm)[1] == len(PROMPT) - 4  # its blocks stayed cached
    assert llm.reset_prefix_cache(reset_running_requests=True)  # nothing runs: nothing to preempt
    assert run(llm)[1] == 0


def test_the_host_tier_is_emptied_too(tiny_model):
    small = {**ENGINE_ARGS, "max_model_len": 48}
    llm = LLM(str(tiny_model("qwen3")), num_kv_blocks=12, kv_offloading_size=1e-3, **small)
    other = [(i * 53) % 900 + 7 for i in range(44)]
    tokens, _ = run(llm)
    run(llm, other)  # all 12 blocks: PROMPT's are evicted to host memory
    assert run(llm) == (tokens, len(PROMPT) - 4) and llm.engine.stats().host_kv_hits == len(PROMPT) - 4
    run(llm, other)  # and again: PROMPT's prefix is in host memory only
    host_hits = llm.engine.stats().host_kv_hits

    assert llm.reset_prefix_cache()
    assert run(llm) == (tokens, 0)  # found neither on the GPU nor in host memory
    assert llm.engine.stats().host_kv_hits == host_hits


def test_a_closed_llm_refuses(tiny_model):
    llm = LLM(str(tiny_model("qwen3")), num_kv_blocks=16, **ENGINE_ARGS)
    llm.close()
    with pytest.raises(ValueError, match="closed"):
        llm.reset_prefix_cache()
