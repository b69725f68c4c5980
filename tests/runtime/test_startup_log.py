"""The engine's start-up phases are logged at INFO, one line each, in the order they run, by `LLM(...)`
and visible under `mopt generate` and `mopt serve`: the user sees what start-up spends its time on.
The lines are checked by name and order only, never by their durations."""

from __future__ import annotations

import logging
import re
import subprocess
import sys

import pytest

from model_optimizer.runtime.llm import LLM
from tests.runtime.server.test_process import REPO
from tests.runtime.server.test_startup import Server

# on a CPU: no warm-up and no graph capture (CUDA only; see runtime/runner/model_runner.py)
CPU_PHASES = ["imports", "config", "tokenizer", "weights", "kv sizing", "kv allocation", "engine", "total"]
PHASE = re.compile(r"start-up: ([a-z -]+?) \d+\.\d\d s")


def phases(lines: list[str]) -> list[str]:
    return [m.group(1) for line in lines if (m := PHASE.search(line))]


def test_llm_logs_each_phase_once_in_order(tiny_model, caplog):
    with caplog.at_level(logging.INFO, logger="model_optimizer.startup"):
        LLM(str(tiny_model("qwen3")), max_model_len=128, num_kv_blocks=16)
    records = [r for r in caplog.records if r.name == "model_optimizer.startup"]
    assert all(r.levelno == logging.INFO for r in records)
    assert phases([r.getMessage() for r in records]) == CPU_PHASES


@pytest.mark.slow
def test_mopt_generate_shows_the_phases_before_generating(tiny_model):
    run = subprocess.run(
        [sys.executable, "-m", "model_optimizer.cli.main", "generate", "--model", str(tiny_model("qwen3"))]
        + ["--prompt", "hello", "--max-tokens", "2", "--max-model-len", "128", "--num-kv-blocks", "16"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert run.returncode == 0, run.stderr
    lines = run.stderr.splitlines()
    assert phases(lines) == CPU_PHASES, run.stderr
    total = next(i for i, line in enumerate(lines) if "start-up: total" in line)
    assert lines[total].startswith("mopt generate: start-up: total")
    assert total < next(i for i, line in enumerate(lines) if "generating for 1 prompt" in line)


@pytest.mark.slow
def test_mopt_serve_logs_the_phases_before_it_listens(tiny_model):
    server = Server(str(tiny_model("qwen3")), "--max-model-len", "128", "--num-kv-blocks", "16")
    try:
        running = server.wait_for_line("Uvicorn running")
        before = server.lines[:running]
        # the engine-core process loads the model (its lines tagged `core`), then, on Linux, the serving
        # process's own age when it starts listening (imports and app set-up included)
        assert phases(before) == CPU_PHASES + ["process before listening"], "\n".join(server.lines)
        tagged = [line for line in before if PHASE.search(line)]
        assert all(" INFO core model_optimizer.startup: " in line for line in tagged[:-1])
        assert " INFO model_optimizer.startup: " in tagged[-1]
    finally:
        server.stop()
