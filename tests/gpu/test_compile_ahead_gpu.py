"""A cold start on the GPU compiles its Triton kernels ahead, in worker processes, while the weights load
(runtime/runner/compile_ahead.py); the engine's own forwards then compile nothing, and a second start of
the same settings starts no workers. Each start is a fresh process on an empty compile-cache root."""

from __future__ import annotations

import os
import re
import subprocess
import sys

import pytest
import torch

from tests.runtime.server.test_process import REPO

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")

CHILD = """
import logging, os, sys
from pathlib import Path
logging.basicConfig(level=logging.INFO, stream=sys.stderr, format="%(name)s: %(message)s")
from model_optimizer import LLM
LLM(sys.argv[1], load_format="dummy", dtype="bfloat16", max_model_len=2048, gpu_memory_utilization=0.4)
folder = Path(os.environ["TRITON_CACHE_DIR"])
print("ENTRIES", sum(1 for p in folder.iterdir() if p.is_dir()), "MARKERS", len(list(folder.glob("mopt-start-*"))))
"""


def start(root) -> tuple[str, int, int]:
    env = {k: v for k, v in os.environ.items() if k not in ("TRITON_CACHE_DIR", "TRITON_INTERPRET")}
    env |= {"MOPT_COMPILE_CACHE_DIR": str(root), "PYTHONPATH": str(REPO)}
    model = str(REPO / "benchmarks" / "configs" / "qwen3-0.6b")
    done = subprocess.run([sys.executable, "-c", CHILD, model], env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-4000:]
    entries, markers = re.search(r"ENTRIES (\d+) MARKERS (\d+)", done.stdout).groups()
    return done.stderr, int(entries), int(markers)


def test_a_cold_start_compiles_ahead_and_a_second_start_does_not(tmp_path):
    log, entries, markers = start(tmp_path)
    ahead = re.search(r"compiled ahead: (\d+) new kernel variants in [\d.]+ s by (\d+) processes(.*)", log)
    assert ahead is not None, log[-4000:]
    assert int(ahead.group(1)) > 0 and ahead.group(3) == "", ahead.group(0)  # none stopped or failed
    assert "start-up: compile ahead" in log and markers == 1
    assert entries == int(ahead.group(1)), "the engine compiled kernels (or launchers) the workers had not"
    again, entries_again, _ = start(tmp_path)
    assert "compiled ahead" not in again and "start-up: compile ahead" not in again
    assert entries_again == entries  # a warm start compiles nothing
