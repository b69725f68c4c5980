"""Sampling on the GPU: the fused Gumbel-max kernel draws from softmax(logits / T), seeded requests do
not depend on their batch, and asynchronous scheduling changes no token."""

from __future__ import annotations

import random

import pytest
import torch

from model_optimizer import LLM, SamplingParams
from model_optimizer.runtime.kernels.sampling import gumbel_sample


def test_fused_kernel_follows_softmax_over_a_full_vocabulary():
    rows, vocab, temperature = 20000, 151936, 0.6
    base = torch.tensor([2.0, 1.0, 0.5, 0.0, -1.0], device="cuda")
    logits = torch.full((rows, vocab), -40.0, device="cuda")
    spots = torch.tensor([3, 40000, 70001, 120000, vocab - 1], device="cuda")  # spread over chunks
    logits[:, spots] = base
    seeds = torch.randint(0, 2**62, (rows,), device="cuda")
    got = gumbel_sample(logits.to(torch.bfloat16), torch.full((rows,), 1 / temperature, device="cuda"), seeds)
    counts = torch.stack([(got == s).sum() for s in spots]).double().cpu()
    probs = torch.softmax(base.double().cpu() / temperature, dim=0)
    std = (rows * probs * (1 - probs)).sqrt()
    assert counts.sum() == rows
    assert ((counts - rows * probs).abs() <= 5 * std).all(), (counts, rows * probs)


@pytest.fixture(scope="module")
def model_dir(tiny_model):
    return str(tiny_model("qwen3"))


def prompts(seed: int, count: int) -> list[list[int]]:
    rng = random.Random(seed)
    return [[rng.randrange(3, 1000) for _ in range(rng.randrange(5, 120))] for _ in range(count)]


def test_seeded_sampling_is_batch_independent_and_async_changes_nothing(model_dir):
    """float32, so that batch shapes move logits by ~1e-6, far below any gap the noise leaves."""
    batch = prompts(3, 16)
    params = [
        SamplingParams(temperature=0.8, seed=100 + i, max_tokens=20, ignore_eos=True)
        if i % 2
        else SamplingParams(temperature=0, max_tokens=20, ignore_eos=True)
        for i in range(len(batch))
    ]
    llm = LLM(model_dir, dtype="float32", gpu_memory_utilization=0.2, max_num_seqs=32)
    together = [o.outputs[0].token_ids for o in llm.generate(batch, params)]
    alone = llm.generate([batch[1]], params[1])[0].outputs[0].token_ids
    assert alone == together[1]
    sync = LLM(model_dir, dtype="float32", gpu_memory_utilization=0.2, max_num_seqs=32, async_scheduling=False)
    assert [o.outputs[0].token_ids for o in sync.generate(batch, params)] == together
    unseeded = SamplingParams(temperature=1.0, max_tokens=20, ignore_eos=True)
    draws = {tuple(o.outputs[0].token_ids) for o in llm.generate([batch[0]] * 4, unseeded)}
    assert len(draws) > 1  # fresh noise each request


def test_decode_graphs_draw_plain_batches_and_hand_the_others_their_logits(model_dir):
    """The LM head and the sampler inside the decode graphs (runner/graph_sampling.py): greedy tokens as the
    runner's own sampling gives them from the same graph's hidden states, fresh noise per unseeded request,
    and batches the graph cannot draw (seeded, logprobs) sampled outside it."""
    batch = prompts(5, 6)
    greedy = SamplingParams(temperature=0, max_tokens=24, ignore_eos=True)
    llm = LLM(model_dir, dtype="float32", gpu_memory_utilization=0.2, max_num_seqs=32)
    decode = llm.runner.decode_runner
    sampling = decode.sampling
    assert sampling is not None and decode.graphs
    in_graph = [o.outputs[0].token_ids for o in llm.generate(batch, greedy)]
    assert sampling.steps >= greedy.max_tokens - 1
    decode.sampling = None  # the graphs stay; the runner samples from their hidden states itself
    outside = [o.outputs[0].token_ids for o in llm.generate(batch, greedy)]
    decode.sampling = sampling
    assert in_graph == outside

    steps = sampling.steps
    draws = {tuple(o.outputs[0].token_ids) for o in llm.generate([batch[0]] * 4, SamplingParams(temperature=1.0))}
    assert len(draws) > 1 and sampling.steps > steps
    steps = sampling.steps
    seeded = [SamplingParams(temperature=0.8, seed=7, max_tokens=12, ignore_eos=True)] * 2
    again = llm.generate(batch[:2], seeded)
    assert sampling.steps == steps  # seeded rows: the graph's draw is not theirs
    assert again[0].outputs[0].token_ids == llm.generate(batch[:1], seeded[0])[0].outputs[0].token_ids
    logprobs = llm.generate(batch[:2], SamplingParams(temperature=0, max_tokens=12, ignore_eos=True, logprobs=3))
    assert sampling.steps == steps
    assert [o.outputs[0].token_ids for o in logprobs] == [t[:12] for t in in_graph[:2]]
