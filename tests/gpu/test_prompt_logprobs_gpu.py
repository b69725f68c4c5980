"""prompt_logprobs on a real GPU: chunked prefill beside CUDA-graph decodes, against transformers on CUDA."""

from __future__ import annotations

import random

import pytest
import torch

from model_optimizer import LLM, SamplingParams


def test_prompt_logprobs_match_transformers_beside_graphed_decodes(tiny_model):
    from transformers import AutoModelForCausalLM

    model_dir = str(tiny_model("qwen3"))
    ref = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32).cuda().eval()
    llm = LLM(model_dir, dtype="float32", gpu_memory_utilization=0.2, max_num_seqs=16, max_num_batched_tokens=37)
    assert llm.runner.decode_runner is not None
    rng = random.Random(0)
    prompts = [[rng.randrange(3, 1000) for _ in range(rng.randrange(2, 200))] for _ in range(12)]
    params = [  # every other request decodes (CUDA graphs) while the others prefill in chunks
        SamplingParams(temperature=0, max_tokens=24, ignore_eos=True, prompt_logprobs=5 if i % 2 else None)
        for i in range(len(prompts))
    ]
    for prompt, p, out in zip(prompts, params, llm.generate(prompts, params)):
        if p.prompt_logprobs is None:
            assert out.prompt_logprobs is None
            continue
        with torch.no_grad():
            logits = ref(torch.tensor([prompt], device="cuda")).logits[0, :-1].float()
        expected = torch.log_softmax(logits, dim=-1).cpu()
        assert out.prompt_logprobs[0] is None and len(out.prompt_logprobs) == len(prompt)
        for row, entry, token_id in zip(expected, out.prompt_logprobs[1:], prompt[1:]):
            assert entry[token_id].logprob == pytest.approx(row[token_id].item(), abs=2e-3)
            top = row.topk(5)
            fifth = top.values[-1].item()
            for value, top_id in zip(top.values.tolist(), top.indices.tolist()):
                if value > fifth + 2e-3:  # clear of a near-tie at the cut, which may fall either way
                    assert entry[top_id].logprob == pytest.approx(value, abs=2e-3)
