"""The per-GPU memory plan against the KV blocks a two-GPU tensor-parallel engine allocates (dummy
weights, Llama-3.1-8B's config): within 3%, as on one GPU. Skipped unless 2 GPUs are visible.

Each case starts its own process (model_optimizer/model/inspect/plan_check.py), about 1-2 minutes each."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from model_optimizer.model.inspect.plan_check import compare_with_engine

pytestmark = pytest.mark.skipif(torch.cuda.device_count() < 2, reason="needs 2 CUDA GPUs")

CONFIGS = Path(__file__).resolve().parents[2] / "benchmarks" / "configs"


@pytest.mark.parametrize("utilization", [0.5, 0.9])
def test_plan_per_gpu_matches_the_tp2_engines_kv_blocks(utilization):
    result = compare_with_engine(CONFIGS / "llama-3.1-8b", utilization, 8192, tensor_parallel_size=2)
    assert result["tensor_parallel_size"] == 2
    assert abs(result["relative_error"]) < 0.03, result
