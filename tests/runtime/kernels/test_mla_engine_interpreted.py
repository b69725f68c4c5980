"""The GPU's path of a DeepSeek model (the latent row stored by the store kernel, the absorbed attention in
the Triton kernel) run on the CPU through the interpreter: transformers' greedy tokens, with prefill chunks
and decode steps."""

from __future__ import annotations

import pytest

from model_optimizer import LLM, SamplingParams
from model_optimizer.runtime.kernels.mla_attention import latent_attention
from model_optimizer.runtime.kernels.store_kv import store_kv
from model_optimizer.runtime.layers import mla
from tests.runtime.models.test_families_engine import reference, token_ids


@pytest.mark.parametrize("name", ["deepseek_v2", "deepseek_v3"])
def test_triton_path_gives_transformers_tokens(tiny_model, monkeypatch, name):
    calls = []

    def kernels(x):
        calls.append(x.shape[0])
        return store_kv, latent_attention

    monkeypatch.setattr(mla, "gpu_kernels", kernels)
    prompts, expected = reference(tiny_model, name)
    prompts, expected = prompts[:2], [e[:6] for e in expected[:2]]
    llm = LLM(str(tiny_model(name)), dtype="float32", kv_cache_memory=1 << 22, block_size=4, max_num_batched_tokens=16)
    assert token_ids(llm.generate(prompts, SamplingParams(temperature=0, max_tokens=6))) == expected
    assert 1 in calls and max(calls) > 1  # decode steps and prefill chunks both went through the kernels
