"""SamplingParams.prompt_logprobs against transformers' own forward on a tiny float32 Qwen3.

The reference is transformers: log_softmax of the logits at positions 0..P-2, read at the next prompt
token (its rank and top-k from the same row). Every engine variant (chunked prefill, prefix caching,
n > 1, preemption, synchronous scheduling, DELTA outputs) must give the same numbers.
"""

from __future__ import annotations

import random

import msgspec
import pytest
import torch

from model_optimizer import LLM, SamplingParams
from model_optimizer.runtime.engine.messages import CoreOutputs, OutputsBuilder, PromptLogprobsPart, decode_outputs
from model_optimizer.runtime.engine.messages import encode as encode_message
from model_optimizer.runtime.sampler_output import PromptLogprobs
from model_optimizer.runtime.sampling_params import RequestOutputKind

TOL = 1e-4
K = 3


@pytest.fixture(scope="module")
def model_dir(tiny_model):
    return str(tiny_model("qwen3"))


@pytest.fixture(scope="module")
def hf_model(model_dir):
    from transformers import AutoModelForCausalLM

    return AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32).eval()


def reference(hf_model, prompt: list[int]) -> torch.Tensor:
    """(P - 1, vocab) log-probabilities of each next prompt token's distribution, by transformers."""
    with torch.no_grad():
        logits = hf_model(torch.tensor([prompt])).logits[0].float()
    return torch.log_softmax(logits[:-1], dim=-1)


def assert_matches(hf_model, prompt: list[int], prompt_logprobs, k: int = K) -> None:
    assert prompt_logprobs is not None and len(prompt_logprobs) == len(prompt)
    assert prompt_logprobs[0] is None
    expected = reference(hf_model, prompt)
    for position, (entry, token_id) in enumerate(zip(prompt_logprobs[1:], prompt[1:])):
        row = expected[position]
        want = row[token_id].item()
        assert entry[token_id].logprob == pytest.approx(want, abs=TOL)
        # rank: 1 + tokens more likely (a token within float noise of it may count either way)
        assert int((row > want + TOL).sum()) + 1 <= entry[token_id].rank <= int((row > want - TOL).sum()) + 1
        top = row.topk(k)
        assert set(entry) == {token_id, *top.indices.tolist()}
        for rank, (t, v) in enumerate(zip(top.indices.tolist(), top.values.tolist()), start=1):
            assert entry[t].logprob == pytest.approx(v, abs=TOL)
            assert t == token_id or entry[t].rank == rank


def prompts_of(count: int, seed: int, lo: int = 5, hi: int = 60, prefix: list[int] | None = None) -> list[list[int]]:
    rng = random.Random(seed)
    return [(prefix or []) + [rng.randrange(3, 1000) for _ in range(rng.randrange(lo, hi))] for _ in range(count)]


def params(**changes) -> SamplingParams:
    return SamplingParams(**{"temperature": 0, "max_tokens": 3, "ignore_eos": True, "prompt_logprobs": K, **changes})


def test_prompt_logprobs_match_transformers(model_dir, hf_model):
    llm = LLM(model_dir, dtype="float32", kv_cache_memory=1 << 24)
    prompts = prompts_of(4, seed=1)
    for prompt, output in zip(prompts, llm.generate(prompts, params())):
        assert_matches(hf_model, prompt, output.prompt_logprobs)
    plain = llm.generate(prompts[:1], params(prompt_logprobs=None))[0]
    assert plain.prompt_logprobs is None


def test_chunked_prefill_computes_each_chunk(model_dir, hf_model):
    llm = LLM(model_dir, dtype="float32", kv_cache_memory=1 << 24, max_num_batched_tokens=7)
    prompts = prompts_of(3, seed=2, lo=20)
    for prompt, output in zip(prompts, llm.generate(prompts, params())):
        assert_matches(hf_model, prompt, output.prompt_logprobs)


@pytest.mark.parametrize("async_scheduling", [True, False])
def test_prefix_cache_hit_is_not_taken_by_a_request_that_asks(model_dir, hf_model, async_scheduling):
    llm = LLM(model_dir, dtype="float32", kv_cache_memory=1 << 24, async_scheduling=async_scheduling)
    prefix = prompts_of(1, seed=3, lo=40, hi=41)[0]
    first, second = prompts_of(2, seed=4, prefix=prefix)
    llm.generate([first], params(prompt_logprobs=None))  # the prefix's blocks are now cached
    output = llm.generate([second], params())[0]
    assert output.num_cached_tokens == 0
    assert_matches(hf_model, second, output.prompt_logprobs)
    again = llm.generate([second], params(prompt_logprobs=None))[0]  # its own blocks were cached meanwhile
    assert again.num_cached_tokens >= 32


def test_n_completions_share_one_prompt_logprobs(model_dir, hf_model):
    llm = LLM(model_dir, dtype="float32", kv_cache_memory=1 << 24, max_num_batched_tokens=9)
    prompt = prompts_of(1, seed=5, lo=30)[0]
    output = llm.generate([prompt], params(n=3, temperature=1.0, seed=7))[0]
    assert len(output.outputs) == 3
    assert_matches(hf_model, prompt, output.prompt_logprobs)


def test_preemption_does_not_report_twice(model_dir, hf_model):
    llm = LLM(model_dir, dtype="float32", num_kv_blocks=24, block_size=4, max_model_len=96, max_num_batched_tokens=8)
    prompts = prompts_of(6, seed=6, lo=20, hi=40)
    outputs = llm.generate(prompts, params(max_tokens=20))
    assert llm.engine.stats().num_preemptions > 0
    for prompt, output in zip(prompts, outputs):
        assert_matches(hf_model, prompt, output.prompt_logprobs)


def test_delta_outputs_hand_out_each_position_once(model_dir, hf_model):
    llm = LLM(model_dir, dtype="float32", kv_cache_memory=1 << 24, max_num_batched_tokens=6)
    prompt = prompts_of(1, seed=8, lo=25)[0]
    llm.engine.add_request("r", prompt, params(output_kind=RequestOutputKind.DELTA))
    collected = []
    while llm.engine.has_unfinished_requests():
        for output in llm.engine.step():
            if output.prompt_logprobs:
                collected += output.prompt_logprobs
    assert_matches(hf_model, prompt, collected)


def test_one_token_prompt_has_only_the_leading_none(model_dir):
    llm = LLM(model_dir, dtype="float32", kv_cache_memory=1 << 24)
    assert llm.generate([[17]], params())[0].prompt_logprobs == [None]


def test_zero_alternatives_keeps_the_prompt_token_alone(model_dir, hf_model):
    llm = LLM(model_dir, dtype="float32", kv_cache_memory=1 << 24)
    prompt = prompts_of(1, seed=9)[0]
    output = llm.generate([prompt], params(prompt_logprobs=0))[0]
    assert all(list(entry) == [t] for entry, t in zip(output.prompt_logprobs[1:], prompt[1:]))
    assert_matches(hf_model, prompt, output.prompt_logprobs, k=0)


@pytest.mark.parametrize("value", [-1, 21, 1.5, True])
def test_prompt_logprobs_out_of_range_is_refused(value):
    with pytest.raises(ValueError, match=r"prompt_logprobs must be an integer in \[0, 20\]"):
        SamplingParams(prompt_logprobs=value)


def test_prompt_logprobs_cross_the_core_message_contract():
    part = PromptLogprobs(1, [5, 6], [-1.5, -2.5], [2, 1], 2, [9, 5, 6, 9], [-0.5, -1.5, -2.5, -3.0])
    builder = OutputsBuilder()
    builder.prompt_logprobs.append(PromptLogprobsPart.of("req", part))
    out = decode_outputs(encode_message(builder.build()))
    assert isinstance(out, CoreOutputs)
    (decoded,) = out.prompt_logprobs
    first, second = decoded.positions()
    assert list(first) == [5, 9] and first[5].rank == 2 and first[9].logprob == -0.5
    assert list(second) == [6, 9] and second[6].rank == 1 and second[9].rank == 2
    assert msgspec.msgpack.decode(encode_message(builder.build()))[-1]  # the field travels


def test_merged_deltas_concatenate_prompt_logprobs():
    from model_optimizer.runtime.engine.outputs import CompletionOutput, RequestOutput, merge_outputs
    from model_optimizer.runtime.sampler_output import Logprob

    def delta(prompt_logprobs, token_id):
        return RequestOutput(
            "r", None, [5, 6, 7], [CompletionOutput(0, "", [token_id], None)], False, 0, prompt_logprobs=prompt_logprobs
        )

    a, b = {6: Logprob(6, -1.0, 2, {})}, {7: Logprob(7, -2.0, 1, {})}
    merged = merge_outputs([delta([None, a], 1), delta([b], 2), delta([], 3)], RequestOutputKind.DELTA)
    assert merged.prompt_logprobs == [None, a, b] and merged.outputs[0].token_ids == [1, 2, 3]
    assert merge_outputs([delta([], 1), delta([], 2)], RequestOutputKind.DELTA).prompt_logprobs == []


def test_a_request_id_reused_while_the_aborted_ones_chunk_is_in_flight_gets_its_own(model_dir, hf_model):
    """Asynchronous scheduling: a request is aborted while a chunk of its prompt is in flight, and a new
    one with its id and another prompt comes in at once. The chunk's prompt logprobs are the aborted
    request's: the new one must not get them as its own."""
    llm = LLM(model_dir, dtype="float32", kv_cache_memory=1 << 24, max_num_batched_tokens=6)
    engine = llm.engine
    old, new = prompts_of(2, seed=9, lo=20)
    engine.add_request("r", old, params())
    engine.step()
    assert engine.core._in_flight is not None and "r" in engine.core._in_flight.scheduler_output.num_scheduled_tokens
    engine.abort("r")
    engine.add_request("r", new, params())
    collected = []
    while engine.has_unfinished_requests():
        for output in engine.step():
            if output.finished:
                collected = output.prompt_logprobs
    assert_matches(hf_model, new, collected)
