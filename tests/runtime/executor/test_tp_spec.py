"""Speculative decoding under tensor parallelism (two gloo workers on the CPU): n-gram proposals travel in
the SchedulerOutput, rank 0 samples every verify row and the others take its draws by broadcast, so the
tokens are those of one process without speculation, greedy and seeded alike."""

from __future__ import annotations

from model_optimizer import LLM
from tests.runtime.executor.processes import alive
from tests.runtime.executor.test_tp_engine import ENGINE, GREEDY, PROMPTS, sampled_params

SPEC = {"method": "ngram", "num_speculative_tokens": 3, "adaptive": False}


def outputs(llm: LLM) -> dict:
    return {
        "greedy": [o.outputs[0].token_ids for o in llm.generate(PROMPTS, GREEDY)],
        "sampled": [[c.token_ids for c in o.outputs] for o in llm.generate(PROMPTS, sampled_params())],
    }


def test_tp2_with_ngram_proposals_matches_one_process_without(tiny_model):
    folder = str(tiny_model("qwen3"))
    expected = outputs(LLM(folder, **ENGINE))
    llm = LLM(folder, tensor_parallel_size=2, speculative_config=SPEC, **ENGINE)
    pids = llm.runner.worker_pids
    try:
        assert outputs(llm) == expected
        stats = llm.engine.stats()
    finally:
        llm.close()
    assert stats.spec_num_accepted_tokens > 0
    assert not alive(pids)
