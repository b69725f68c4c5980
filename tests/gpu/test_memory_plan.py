"""The memory plan against the engine's measured KV allocation on a real GPU (dummy weights):
Qwen3-0.6B and Llama-3.1-8B configs at two utilizations, Qwen3-30B-A3B's and DeepSeek-V2-Lite's, within 3% of
the blocks allocated.

Each case starts its own process (see model_optimizer/model/inspect/plan_check.py), about 20-60 s each."""

from __future__ import annotations

from pathlib import Path

import pytest

from model_optimizer.model.inspect.plan_check import compare_with_engine

CONFIGS = Path(__file__).resolve().parents[2] / "benchmarks" / "configs"
CASES = [("qwen3-0.6b", 0.5, 4096), ("qwen3-0.6b", 0.9, 4096), ("llama-3.1-8b", 0.3, 8192), ("llama-3.1-8b", 0.9, 8192)]
CASES += [("qwen3-30b-a3b", 0.9, 4096)]  # a mixture of experts: 61 GB of experts, 8 of 128 per token
CASES += [("deepseek-v2-lite", 0.9, 4096)]  # multi-head latent attention: one 576-value row per token and layer


@pytest.mark.parametrize(("config", "utilization", "max_model_len"), CASES)
def test_plan_matches_the_engines_kv_blocks(config, utilization, max_model_len):
    result = compare_with_engine(CONFIGS / config, utilization, max_model_len)
    assert result["planned_bytes_per_block"] == result["bytes_per_block"]
    assert abs(result["relative_error"]) < 0.03, result
