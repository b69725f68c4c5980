"""Sampling inside the decode graphs (runner/graph_sampling.py), on the CPU: the padded decode path with the
LM head and the fused sampler after the forward (the Triton interpreter), put in by hand as
test_decode_runner.py does; tests/gpu/test_sampling_gpu.py checks the captured graphs."""

from __future__ import annotations

import json
import random

import jsonschema
import pytest
import torch

from model_optimizer import LLM, SamplingParams
from model_optimizer.runtime.layers.sampler import SamplingInput
from model_optimizer.runtime.runner.decode_runner import DecodeRunner
from model_optimizer.runtime.runner.graph_sampling import GraphSampling
from model_optimizer.runtime.structured import StructuredOutputs

GREEDY = SamplingParams(temperature=0, max_tokens=8, ignore_eos=True)


@pytest.fixture(scope="module")
def model_dir(tiny_model):
    return str(tiny_model("qwen3"))


def prompts(count: int) -> list[list[int]]:
    rng = random.Random(5)
    return [[rng.randrange(3, 1000) for _ in range(rng.randrange(3, 30))] for _ in range(count)]


def with_graph_sampling(llm: LLM, max_rows: int = 4) -> GraphSampling:
    """`llm` with the GPU's padded decode path, its sampling inside, as a decode graph would hold it."""
    runner = llm.runner
    sampling = GraphSampling(runner.model, runner.sampler, max_rows, runner.device)
    runner.decode_runner = DecodeRunner(
        runner.model, runner.batch, max_rows, runner.kv_caches[0].shape[3], use_graphs=False, sampling=sampling
    )
    return sampling


def test_greedy_tokens_come_from_the_graph_and_match_the_plain_path(model_dir):
    expected = [o.outputs[0].token_ids for o in LLM(model_dir, kv_cache_memory=1 << 24).generate(prompts(3), GREEDY)]
    llm = LLM(model_dir, kv_cache_memory=1 << 24)
    sampling = with_graph_sampling(llm)
    got = [o.outputs[0].token_ids for o in llm.generate(prompts(3), GREEDY)]
    assert sampling.steps >= GREEDY.max_tokens - 1  # every decode step drew in the "graph"
    assert got == expected


def test_batches_the_graph_cannot_draw_sample_from_its_logits_as_before(model_dir):
    """Logprobs, a seeded row, top-k: the graph's draw is left unread, the logits it computed are used."""
    batch = prompts(3)
    params = [
        SamplingParams(temperature=0, max_tokens=6, ignore_eos=True, logprobs=2),
        SamplingParams(temperature=0.7, seed=11, max_tokens=6, ignore_eos=True),
        SamplingParams(temperature=0.9, top_k=5, seed=12, max_tokens=6, ignore_eos=True),
    ]
    expected = LLM(model_dir, kv_cache_memory=1 << 24).generate(batch, params)
    llm = LLM(model_dir, kv_cache_memory=1 << 24)
    sampling = with_graph_sampling(llm)
    got = llm.generate(batch, params)
    assert sampling.steps == 0
    assert [o.outputs[0].token_ids for o in got] == [o.outputs[0].token_ids for o in expected]
    first, again = list(got[0].outputs[0].logprobs), list(expected[0].outputs[0].logprobs)
    assert [(s.token_id, s.rank, sorted(s.top)) for s in first] == [(s.token_id, s.rank, sorted(s.top)) for s in again]
    assert [s.logprob for s in first] == pytest.approx([s.logprob for s in again], abs=1e-5)


def test_temperature_rows_draw_fresh_noise_each_step_and_buffers_change_only_when_asked(model_dir):
    llm = LLM(model_dir, kv_cache_memory=1 << 24)
    sampling = with_graph_sampling(llm)
    keys = sampling.keys.clone()
    hot = SamplingParams(temperature=1.5, max_tokens=12, ignore_eos=True)
    draws = {tuple(o.outputs[0].token_ids) for o in llm.generate([prompts(1)[0]] * 4, hot)}
    assert len(draws) > 1  # four requests of one prompt, unseeded: different tokens
    assert sampling.steps > 0
    assert bool((sampling.keys != keys).all())  # every row's key moved on (padded rows included)
    assert sampling.inv_temperatures[:4].tolist() == pytest.approx([1 / 1.5] * 4)

    cold = SamplingInput(SamplingParams(temperature=0), [1], [])
    before = sampling.inv_temperatures.clone()
    sampling.prepare([cold, cold])
    assert sampling.inv_temperatures[:2].tolist() == [0.0, 0.0]
    assert torch.equal(sampling.inv_temperatures[2:], before[2:])
    assert sampling.written[:2] == (0.0, 0.0)


def test_which_batches_the_graph_draws():
    def one(**kw) -> SamplingInput:
        return SamplingInput(SamplingParams(**kw), [1], [])

    assert GraphSampling.takes([one(temperature=0), one(temperature=0.8)])
    assert GraphSampling.takes([one(temperature=0, seed=3)])  # greedy: the seed draws nothing
    assert not GraphSampling.takes([one(temperature=0.8, seed=3)])
    assert not GraphSampling.takes([one(temperature=0, logprobs=1)])
    assert not GraphSampling.takes([one(temperature=0.8, top_p=0.9)])
    assert not GraphSampling.takes([one(temperature=0, repetition_penalty=1.2)])


ORDER = {
    "type": "object",
    "properties": {
        "id": {"type": "integer", "minimum": 0, "maximum": 999},
        "tags": {"type": "array", "items": {"enum": ["a", "bb"]}, "maxItems": 3},
    },
    "required": ["id", "tags"],
    "additionalProperties": False,
}


def test_masked_batches_are_drawn_by_the_masked_draw_and_match_the_plain_path(model_dir):
    """Grammar-masked decode batches: greedy and temperature rows take the bucket's masked draw (the graph's
    draw with the masks; here run eagerly, as under enforce_eager), a logprobs batch the sampler as before.
    Greedy tokens equal the plain path's, every document validates."""
    so = StructuredOutputs.json(json.dumps(ORDER))
    greedy = SamplingParams(temperature=0, max_tokens=40, structured_outputs=so)
    expected = LLM(model_dir, kv_cache_memory=1 << 24).generate(prompts(3), greedy)
    llm = LLM(model_dir, kv_cache_memory=1 << 24)
    sampling = with_graph_sampling(llm)
    drawn = []  # per draw: whether it was a masked one
    original = sampling.draw

    def counted(logits, mask=None, advance=True):  # noqa: ANN001, ANN202
        drawn.append(mask is not None)
        return original(logits, mask, advance)

    sampling.draw = counted
    got = llm.generate(prompts(3), greedy)
    assert [o.outputs[0].token_ids for o in got] == [o.outputs[0].token_ids for o in expected]
    assert sum(drawn) >= 5  # masked decode steps drawn by the masked draw, not the sampler
    hot = SamplingParams(temperature=1.0, max_tokens=40, structured_outputs=so)
    for out in llm.generate(prompts(3), [greedy, hot, hot]):
        assert out.outputs[0].finish_reason == "stop"
        jsonschema.validate(json.loads(out.outputs[0].text), ORDER)
    drawn.clear()
    logprobs = SamplingParams(temperature=0, max_tokens=20, logprobs=1, structured_outputs=so)
    llm.generate(prompts(2), logprobs)
    assert not any(drawn)  # a batch asking logprobs samples outside
