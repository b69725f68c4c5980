"""Quantized layers inside the engine on a GPU: CUDA-graph decode gives the eager path's tokens."""

from __future__ import annotations

import pytest

from model_optimizer import LLM, SamplingParams


@pytest.mark.parametrize("method", ["fp8", "int8", "int8-w8a8", "rtn-int4"])
def test_quantized_decode_same_with_and_without_graphs(method):
    from model_optimizer.assets import reference_model_path

    folder = str(reference_model_path())
    params = SamplingParams(max_tokens=24, temperature=0.0, ignore_eos=True)
    prompts = ["The json module", "To open a file for reading,", "def fibonacci(n):"]
    graphed = LLM(folder, quantization=method, gpu_memory_utilization=0.3).generate(prompts, params)
    eager = LLM(folder, quantization=method, gpu_memory_utilization=0.3, enforce_eager=True).generate(prompts, params)
    for g, e in zip(graphed, eager):
        assert g.outputs[0].token_ids == e.outputs[0].token_ids
