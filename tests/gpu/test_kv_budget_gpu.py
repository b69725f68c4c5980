"""The KV cache leaves room for the activations when memory held elsewhere bounds it: with half the GPU
taken by another allocation in this process, an engine asked for 85% of the GPU sizes its cache from
what is free, captures its CUDA graphs and serves a long prompt (the cache once took all but 256 MiB
of the free memory, and the first graph capture ran out of memory)."""

from __future__ import annotations

import logging

import pytest
import torch

from model_optimizer import LLM, SamplingParams
from tests.runtime.server.test_process import REPO

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")


def test_cache_sized_by_free_memory_leaves_the_activation_peak(caplog):
    free, _ = torch.cuda.mem_get_info()
    hog = torch.empty(int(free * 0.5), dtype=torch.uint8, device="cuda")  # another holder: free now binds
    llm = None
    try:
        with caplog.at_level(logging.INFO, logger="model_optimizer"):
            llm = LLM(
                str(REPO / "benchmarks" / "configs" / "qwen3-0.6b"),
                load_format="dummy",
                dtype="bfloat16",
                max_model_len=4096,
                gpu_memory_utilization=0.85,
            )
        line = next(r.getMessage() for r in caplog.records if r.getMessage().startswith("GPU memory:"))
        assert "activations" in line, line
        params = SamplingParams(temperature=0, max_tokens=4, ignore_eos=True, detokenize=False)
        outputs = llm.generate([[(i * 7) % 5000 + 1 for i in range(4000)], [5, 6, 7]], params)
        assert [len(o.outputs[0].token_ids) for o in outputs] == [4, 4]
    finally:
        del llm, hog
        torch.cuda.empty_cache()
