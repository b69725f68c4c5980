"""The GPU's path of the Llama-family decoders run on the CPU through the interpreter: rotary and the KV
store in one kernel (`norm_rotate_store`), then the Triton paged attention, give transformers' greedy
tokens over prefill chunks and decode steps (Gemma 2's attention soft-capping in the kernel too). GLM-4's
partial rotary keeps its own rotation and `store_kv`."""

from __future__ import annotations

import pytest

from model_optimizer import LLM, SamplingParams
from model_optimizer.runtime.kernels.paged_attention import paged_attention
from model_optimizer.runtime.kernels.rotary import norm_rotate_store
from model_optimizer.runtime.kernels.store_kv import store_kv
from model_optimizer.runtime.layers import attention
from tests.runtime.models.test_families_engine import reference, token_ids


@pytest.mark.parametrize(
    ("name", "fused"),
    [("llama3", True), ("qwen3", True), ("mistral", True), ("gemma3", True), ("gemma2", True), ("glm4", False)],
)
def test_triton_path_gives_transformers_tokens(tiny_model, monkeypatch, name, fused):
    calls = {"norm_rotate_store": [], "store_kv": []}

    def counted(kernel, key):
        def launch(*args, **kwargs):
            calls[key].append(args[0].shape[0])  # tokens
            return kernel(*args, **kwargs)

        return launch

    kernels = attention.GpuKernels(
        counted(store_kv, "store_kv"), counted(norm_rotate_store, "norm_rotate_store"), paged_attention
    )
    monkeypatch.setattr(attention, "gpu_kernels", lambda x: kernels)
    prompts, expected = reference(tiny_model, name)
    prompts, expected = prompts[:2], [e[:6] for e in expected[:2]]
    llm = LLM(str(tiny_model(name)), dtype="float32", kv_cache_memory=1 << 22, block_size=4, max_num_batched_tokens=16)
    assert token_ids(llm.generate(prompts, SamplingParams(temperature=0, max_tokens=6))) == expected
    used, unused = ("norm_rotate_store", "store_kv") if fused else ("store_kv", "norm_rotate_store")
    assert not calls[unused]
    assert 1 in calls[used] and max(calls[used]) > 1  # decode steps and prefill chunks both went through it
