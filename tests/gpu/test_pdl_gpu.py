"""Programmatic dependent launch (kernels/pdl.py) changes when kernels start, never what they compute:
greedy tokens and their top logprobs with PDL on equal those with it off, bit for bit, at batch 1 (the
GEMV reads its first weight tile before waiting) and at batch 8, eagerly and from CUDA graphs."""

from __future__ import annotations

import gc
import random

import pytest
import torch

from model_optimizer import LLM, SamplingParams
from model_optimizer.runtime.kernels import pdl

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU"),
    pytest.mark.skipif(not pdl.AVAILABLE, reason="this Triton has no griddepcontrol"),
]

GREEDY = SamplingParams(temperature=0, max_tokens=32, ignore_eos=True, logprobs=3)


def _run(model_dir: str, on: bool, eager: bool, monkeypatch) -> list:
    monkeypatch.setenv("MOPT_PDL", "1" if on else "0")
    monkeypatch.setattr(pdl, "_capable", {})  # asked again under this setting
    llm = LLM(model_dir, dtype="bfloat16", gpu_memory_utilization=0.1, max_num_seqs=16, enforce_eager=eager)
    hopper = torch.cuda.get_device_capability() >= (9, 0)
    assert pdl.enabled(torch.cuda.current_device()) is (on and hopper)
    rng = random.Random(7)
    batches = [[[rng.randrange(3, 1000) for _ in range(rng.randrange(4, 60))]] for _ in range(2)]
    batches.append([[rng.randrange(3, 1000) for _ in range(rng.randrange(4, 60))] for _ in range(8)])
    results = []
    for batch in batches:  # one request (batch-1 decode), one more, then eight at once
        for out in llm.generate(batch, GREEDY):
            seq = out.outputs[0]
            results.append((seq.token_ids, [sorted(step.top.items()) for step in seq.logprobs]))
    del llm
    gc.collect()
    torch.cuda.empty_cache()
    return results


@pytest.mark.parametrize("eager", [False, True], ids=["graphs", "eager"])
def test_pdl_gives_the_same_tokens_and_logprobs_as_without(tiny_model, eager, monkeypatch):
    model_dir = str(tiny_model("qwen3"))
    assert _run(model_dir, True, eager, monkeypatch) == _run(model_dir, False, eager, monkeypatch)
