"""Tensor parallelism end to end on the CPU: two real gloo worker processes give the same tokens as one.

Each tiny model runs once at tensor_parallel_size 1 and once at 2, in float32, under settings that
make the scheduler exercise everything it does in a real server: prompts sharing a prefix (prefix
caching), prompts longer than the step budget (chunked prefill), and too few KV blocks for every
request at once (preemption). The scheduler is the driver's alone, so both runs take the same
decisions; the test checks the tokens and that those paths really ran.
"""

from __future__ import annotations

import pytest

from model_optimizer import LLM, SamplingParams
from tests.runtime.executor.processes import alive

ENGINE = dict(
    dtype="float32",
    max_model_len=160,
    num_kv_blocks=14,  # 224 tokens for four requests of up to ~130: someone is preempted
    max_num_batched_tokens=32,  # the long prompts take several steps (chunked prefill)
    max_num_seqs=4,
)
PREFIX = "def fibonacci(n):\n    return n if n < 2 else fibonacci(n - 1) + fibonacci(n - 2)\n"
PROMPTS = [PREFIX + "# first", PREFIX + "# second", "The quick brown fox", list(range(5, 45))]
GREEDY = SamplingParams(max_tokens=64, temperature=0.0, ignore_eos=True)


def sampled_params() -> list[SamplingParams]:
    """Seeded draws, a penalty (the engine collects before it launches: nothing pending) and logprobs."""
    return [
        SamplingParams(max_tokens=24, temperature=1.0, seed=7, ignore_eos=True),
        SamplingParams(max_tokens=24, temperature=0.8, top_k=20, top_p=0.9, seed=11, n=2, ignore_eos=True),
        SamplingParams(max_tokens=24, temperature=0.0, presence_penalty=1.0, ignore_eos=True),
        SamplingParams(max_tokens=24, temperature=0.0, logprobs=2, ignore_eos=True),
    ]


def run(llm: LLM) -> dict:
    greedy = llm.generate(PROMPTS, GREEDY)
    stats = llm.engine.stats()
    sampled = llm.generate(PROMPTS, sampled_params())
    return {
        "greedy": [o.outputs[0].token_ids for o in greedy],
        "sampled": [[c.token_ids for c in o.outputs] for o in sampled],
        "logprob_ids": [(lp.token_id, sorted(lp.top)) for lp in sampled[3].outputs[0].logprobs or []],
        "preemptions": stats.num_preemptions,
        "prefix_hits": stats.prefix_cache_hits,
    }


@pytest.mark.parametrize("name", ["llama3", "qwen2", "qwen3"])  # 1 KV head (replicated), 4 and 2 KV heads
def test_tp2_matches_tp1(tiny_model, name):
    folder = str(tiny_model(name))
    expected = run(LLM(folder, **ENGINE))
    llm = LLM(folder, tensor_parallel_size=2, **ENGINE)
    pids = llm.runner.worker_pids
    try:
        got = run(llm)
    finally:
        llm.close()
    assert got == expected
    assert expected["preemptions"] > 0 and expected["prefix_hits"] > 0  # the paths under test really ran
    assert any(ids for ids in expected["logprob_ids"])
    assert not alive(pids)  # close() reaped both workers


def test_tp2_runs_in_order_without_async_scheduling(tiny_model):
    """Synchronous engine: every step is collected before the next launch (no pending handle)."""
    folder = str(tiny_model("qwen3"))
    settings = dict(ENGINE, async_scheduling=False)
    expected = [o.outputs[0].token_ids for o in LLM(folder, **settings).generate(PROMPTS, GREEDY)]
    llm = LLM(folder, tensor_parallel_size=2, **settings)
    pids = llm.runner.worker_pids
    try:
        assert [o.outputs[0].token_ids for o in llm.generate(PROMPTS, GREEDY)] == expected
        with pytest.raises(ValueError, match="tensor_parallel_size"):
            llm.embed(["no weights in this process"])
        steps = llm.engine.num_steps
        llm.runner.start_profile()  # what benchmarks/tp.py does: rank 0 profiles the steps in between
        llm.generate([[5] * 10], SamplingParams(max_tokens=3, temperature=0.0, ignore_eos=True))
        assert llm.runner.stop_profile()["steps"] == llm.engine.num_steps - steps == 3
        assert [o.outputs[0].token_ids for o in llm.generate(PROMPTS, GREEDY)] == expected  # still in step
    finally:
        llm.close()
    assert not alive(pids)


def test_tp2_constrains_sampling_on_rank_0_as_one_process_does(tiny_model):
    """Grammar masks go to rank 0 (it samples for every rank), in a launch split into forward and sampling;
    constrained and free requests together, preempted and chunked, give what one process gives."""
    import json

    from model_optimizer.runtime.structured import StructuredOutputs

    schema = {"type": "array", "items": {"type": "integer", "minimum": 0, "maximum": 999}, "minItems": 2, "maxItems": 6}
    constrained = SamplingParams(max_tokens=40, temperature=0.0, structured_outputs=StructuredOutputs.json(schema))
    params = [constrained, GREEDY, constrained.clone(temperature=1.0, seed=3, n=2), GREEDY]
    folder = str(tiny_model("qwen3"))
    expected = [[c.token_ids for c in o.outputs] for o in LLM(folder, **ENGINE).generate(PROMPTS, params)]
    llm = LLM(folder, tensor_parallel_size=2, **ENGINE)
    try:
        outputs = llm.generate(PROMPTS, params)
    finally:
        llm.close()
    assert [[c.token_ids for c in o.outputs] for o in outputs] == expected
    for text in (outputs[0].outputs[0].text, *(c.text for c in outputs[2].outputs)):
        assert 2 <= len(json.loads(text)) <= 6
