"""Greedy generation token-identical to transformers' generate on the same weights."""

from __future__ import annotations

import random

import pytest
import torch

from model_optimizer import LLM, SamplingParams
from tests.conftest import TINY_MODELS

NUM_NEW = 24
TOP_K = 5


def hf_model(model_dir, dtype: torch.dtype):
    from transformers import AutoModelForCausalLM

    return AutoModelForCausalLM.from_pretrained(str(model_dir), dtype=dtype, attn_implementation="eager").eval()


def hf_generate(model, prompt: list[int]):
    out = model.generate(
        torch.tensor([prompt]),
        max_new_tokens=NUM_NEW,
        do_sample=False,
        output_logits=True,
        return_dict_in_generate=True,
        pad_token_id=0,
    )
    tokens = out.sequences[0, len(prompt) :].tolist()
    logprobs = [torch.log_softmax(step[0].float(), dim=-1) for step in out.logits]
    return tokens, logprobs


def assert_matches_transformers(model_dir, batch: list[list[int]], outputs) -> None:
    """Each output's greedy tokens equal transformers' float32 generate on `model_dir` from its prompt in
    `batch`, and every top logprob is within 1e-4 of transformers' log-softmax."""
    reference = hf_model(model_dir, torch.float32)
    for prompt, out in zip(batch, outputs, strict=True):
        ref_tokens, ref_logprobs = hf_generate(reference, prompt)
        assert out.outputs[0].token_ids == ref_tokens
        for step, lp in enumerate(out.outputs[0].logprobs):
            for token_id, value in lp.top.items():
                assert value == pytest.approx(ref_logprobs[step][token_id].item(), abs=1e-4)


def prompts(vocab: int, seed: int) -> list[list[int]]:
    rng = random.Random(seed)
    return [[rng.randrange(3, vocab) for _ in range(n)] for n in (1, 5, 17, 33, 60)]


@pytest.mark.parametrize("name", sorted(TINY_MODELS))
def test_greedy_matches_transformers_fp32(tiny_model, name):
    model_dir = tiny_model(name)
    llm = LLM(str(model_dir), dtype="float32", kv_cache_memory=1 << 24, block_size=16)
    batch = prompts(llm.runner.vocab_size, seed=len(name))
    params = SamplingParams(temperature=0, max_tokens=NUM_NEW, logprobs=TOP_K)
    ours = llm.generate(batch, params)
    reference = hf_model(model_dir, torch.float32)
    for prompt, out in zip(batch, ours):
        ref_tokens, ref_logprobs = hf_generate(reference, prompt)
        completion = out.outputs[0]
        assert completion.token_ids == ref_tokens
        for step, lp in enumerate(completion.logprobs):
            ref_top = ref_logprobs[step].topk(TOP_K)
            assert set(lp.top) == set(ref_top.indices.tolist())
            for token_id, value in lp.top.items():
                assert value == pytest.approx(ref_logprobs[step][token_id].item(), abs=1e-4)


def test_bf16_logprobs_close_to_transformers(tiny_model):
    """bf16 rounding may flip a near-tie; at a divergence each side's token is in the other's top-k."""
    model_dir = tiny_model("qwen3")
    llm = LLM(str(model_dir), dtype="bfloat16", kv_cache_memory=1 << 24)
    reference = hf_model(model_dir, torch.bfloat16)
    for prompt in prompts(llm.runner.vocab_size, seed=7)[:3]:
        out = llm.generate([prompt], SamplingParams(temperature=0, max_tokens=NUM_NEW, logprobs=TOP_K))[0].outputs[0]
        ref_tokens, ref_logprobs = hf_generate(reference, prompt)
        for step, (ours, ref) in enumerate(zip(out.token_ids, ref_tokens)):
            if ours != ref:
                assert ref in out.logprobs[step].top
                assert ours in ref_logprobs[step].topk(TOP_K).indices.tolist()
                break
