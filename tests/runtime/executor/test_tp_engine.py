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

pytestmark = pytest.mark.slow  # every test starts tensor-parallel worker processes

ENGINE = dict(
    dtype="float32",
    max_model_len=160,
    num_kv_blocks=14,  # 224 tokens for four requests of up to ~130: someone is preempted
    max_num_batched_tokens=32,  # the long prompts take several steps (chunked prefill)
    max_num_seqs=4,
    max_decode_stall=0,  # off: the bound caps prefills by measured step times, so preemptions varied by load
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


@pytest.mark.parametrize(
    ("name", "expert_parallel"),
    [("qwen3_moe", False), ("mixtral", True), ("glm4", False), ("gemma3", False), ("gemma2", False)]
    + [("deepseek_v3", False), ("deepseek_v2_group", True), ("glm4_moe", True)]
    + [("phi3", False), ("phi3_partial", False), ("gpt_oss", False), ("gpt_oss", True)],
    ids=["qwen3-moe-tp", "mixtral-ep", "glm4-tp", "gemma3-tp", "gemma2-tp"]
    + ["deepseek-v3-tp", "deepseek-v2-ep", "glm4-moe-ep"]
    + ["phi3-tp", "phi3-partial-tp", "gpt-oss-tp", "gpt-oss-ep"],
)
def test_new_families_split_over_two_ranks_match_one(tiny_model, name, expert_parallel):
    """Experts sliced (tensor parallel) or placed whole per rank (expert parallel), GLM-4's fused gate_up
    split per rank, Gemma 3's and Gemma 2's layers of two kinds (Gemma 2's scores capped in each rank's
    heads), DeepSeek's latent attention heads split (its latent rows replicated) and shared experts
    sliced, Phi-3's fused q/k/v split within each shard, gpt-oss's sinks split with its heads, its router bias
    replicated and its experts' down bias added once (one rank under slicing, each expert's own rank under
    expert parallelism): the same greedy tokens as one process."""
    assert_two_ranks_match_one(str(tiny_model(name)), expert_parallel)


def assert_two_ranks_match_one(folder: str, expert_parallel: bool) -> None:
    """Two ranks (sliced, or experts whole with `expert_parallel`) give one process's greedy tokens."""
    expected = [o.outputs[0].token_ids for o in LLM(folder, **ENGINE).generate(PROMPTS, GREEDY)]
    llm = LLM(folder, tensor_parallel_size=2, enable_expert_parallel=expert_parallel, **ENGINE)
    try:
        assert [o.outputs[0].token_ids for o in llm.generate(PROMPTS, GREEDY)] == expected
    finally:
        llm.close()


@pytest.mark.parametrize("expert_parallel", [False, True], ids=["tp", "ep"])
def test_gpt_oss_mxfp4_split_over_two_ranks_matches_one(tiny_model, tmp_path, expert_parallel):
    """gpt-oss's MXFP4 experts, dequantized at load by each rank for its own experts or intermediate slice, give
    one process's greedy tokens."""
    from tests import tiny_checkpoints as tiny

    assert_two_ranks_match_one(
        str(tiny.build_mxfp4_checkpoint(tiny_model("gpt_oss"), tmp_path / "mxfp4")), expert_parallel
    )


def test_expert_parallelism_reaches_the_workers(tiny_model, tmp_path):
    """Three experts split over two ranks: fine sliced (tensor parallel), refused whole (expert parallel)."""
    import shutil

    from tests import tiny_checkpoints as tiny

    config = tiny.tiny_config("qwen3_moe", num_experts=3, num_experts_per_tok=2, moe_intermediate_size=32)
    folder = tiny.build_checkpoint(tmp_path / "three_experts", config, with_tokenizer=False)
    for f in tiny_model("qwen3").glob("tokenizer*"):
        shutil.copy(f, folder / f.name)
    llm = LLM(str(folder), tensor_parallel_size=2, **ENGINE)
    llm.close()
    with pytest.raises(Exception, match="3 experts to divide by tensor_parallel_size 2"):
        LLM(str(folder), tensor_parallel_size=2, enable_expert_parallel=True, **ENGINE)


def test_tp2_constrains_sampling_on_rank_0_as_one_process_does(tiny_model):
    """Grammar masks go to rank 0 (it samples for every rank), in a launch split into forward and sampling
    (and the next step prepared before the masks are waited for); constrained and free requests together,
    preempted and chunked, give what one process gives."""
    import json

    from model_optimizer.runtime.structured import StructuredOutputs

    schema = {"type": "array", "items": {"type": "integer", "minimum": 0, "maximum": 999}, "minItems": 2, "maxItems": 6}
    constrained = SamplingParams(max_tokens=40, temperature=0.0, structured_outputs=StructuredOutputs.json(schema))
    params = [constrained, GREEDY, constrained.clone(temperature=1.0, seed=3, n=2), GREEDY]
    folder = str(tiny_model("qwen3"))
    expected = [[c.token_ids for c in o.outputs] for o in LLM(folder, **ENGINE).generate(PROMPTS, params)]
    llm = LLM(folder, tensor_parallel_size=2, **ENGINE)
    executor, prepared = llm.engine.core.runner, []
    prepare = executor.prepare
    executor.prepare = lambda out, pending: prepared.append(out) or prepare(out, pending)
    try:
        outputs = llm.generate(PROMPTS, params)
    finally:
        llm.close()
    assert [[c.token_ids for c in o.outputs] for o in outputs] == expected
    assert prepared  # the workers wrote next steps' inputs while the driver waited for masks
    for text in (outputs[0].outputs[0].text, *(c.text for c in outputs[2].outputs)):
        assert 2 <= len(json.loads(text)) <= 6


def test_tp2_prompt_logprobs_match_one_process(tiny_model):
    """Every rank runs the (split) LM head over the prompt rows; rank 0 reports, once per position."""
    folder = str(tiny_model("qwen3"))
    params = SamplingParams(max_tokens=64, temperature=0.0, ignore_eos=True, prompt_logprobs=3)

    def prompt_logprobs(llm: LLM) -> list:
        outputs = llm.generate(PROMPTS, params)
        return [
            [None if e is None else {t: (lp.logprob, lp.rank) for t, lp in e.items()} for e in o.prompt_logprobs]
            for o in outputs
        ]

    expected = prompt_logprobs(LLM(folder, **ENGINE))
    llm = LLM(folder, tensor_parallel_size=2, **ENGINE)
    try:
        got = prompt_logprobs(llm)
        assert llm.engine.stats().num_preemptions > 0  # recomputed prefills report nothing twice
    finally:
        llm.close()
    for mine, theirs in zip(got, expected):
        assert len(mine) == len(theirs) and mine[0] is None
        for a, b in zip(mine[1:], theirs[1:]):
            assert a.keys() == b.keys()
            assert [v[0] for v in a.values()] == pytest.approx([v[0] for v in b.values()], abs=1e-4)
