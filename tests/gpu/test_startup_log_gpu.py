"""On a GPU the start-up phase log also names the kernel warm-up and, unless eager, the graph capture,
in the order they run (names only, never durations)."""

from __future__ import annotations

import logging

import pytest

from model_optimizer.runtime.llm import LLM
from tests.runtime.test_startup_log import PHASE

COMMON = ["imports", "config", "tokenizer", "weights", "kv sizing", "kv allocation", "warm-up"]


@pytest.mark.parametrize("eager", [False, True])
def test_gpu_start_up_logs_warm_up_and_graph_capture(tiny_model, caplog, eager):
    with caplog.at_level(logging.INFO, logger="model_optimizer.startup"):
        LLM(str(tiny_model("qwen3")), max_model_len=128, enforce_eager=eager, gpu_memory_utilization=0.3)
    names = [
        m.group(1)
        for r in caplog.records
        if r.name == "model_optimizer.startup" and (m := PHASE.search(r.getMessage()))
    ]
    assert names == COMMON + ([] if eager else ["graph capture"]) + ["engine", "total"]
