"""DecodeRunner's padded eager path on the CPU: the same tokens as the plain forward (the GPU suite
checks the graphed path against it, tests/gpu/test_engine_gpu.py)."""

from __future__ import annotations

import random

from model_optimizer import LLM, SamplingParams
from model_optimizer.runtime.runner.decode_runner import DecodeRunner

GREEDY = SamplingParams(temperature=0, max_tokens=10, ignore_eos=True)


def test_padded_decode_gives_the_tokens_of_the_plain_forward(tiny_model):
    model_dir = str(tiny_model("qwen3"))
    rng = random.Random(3)
    prompts = [[rng.randrange(3, 1000) for _ in range(rng.randrange(3, 40))] for _ in range(3)]  # bucket 4: one pad
    expected = [o.outputs[0].token_ids for o in LLM(model_dir, kv_cache_memory=1 << 24).generate(prompts, GREEDY)]

    llm = LLM(model_dir, kv_cache_memory=1 << 24)
    runner = llm.runner
    assert runner.decode_runner is None  # the CPU runs every batch unpadded ...
    decode = DecodeRunner(runner.model, runner.batch, 4, runner.kv_caches[0].shape[3], use_graphs=False)
    run, sizes = decode.run, []

    def counting_run(inputs):
        sizes.append((inputs.num_seqs, inputs.num_padded_seqs))
        return run(inputs)

    decode.run = counting_run
    runner.decode_runner = decode  # ... so put the GPU's padded decode path in by hand
    got = [o.outputs[0].token_ids for o in llm.generate(prompts, GREEDY)]
    assert (3, 4) in sizes  # decode steps of all three went through it, padded to 4
    assert got == expected
