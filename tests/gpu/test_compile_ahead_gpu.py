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


def child_env(**extra: str) -> dict[str, str]:
    """This process's environment for a child start: no cache folder or interpreter mode of its own, the
    repository first on PYTHONPATH and whatever was there kept (a device installs its wheels there)."""
    env = {k: v for k, v in os.environ.items() if k not in ("TRITON_CACHE_DIR", "TRITON_INTERPRET")}
    return env | {"PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))} | extra


def start(root) -> tuple[str, int, int]:
    env = child_env(MOPT_COMPILE_CACHE_DIR=str(root), MOPT_COMPILE_JOBS="8")  # off by default
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


FAILING_CHILD = """
import os, sys, tempfile
from pathlib import Path
from model_optimizer import LLM
try:
    LLM(sys.argv[1], load_format="dummy", dtype="bfloat16", max_model_len=10**7, gpu_memory_utilization=0.4)
except ValueError as exc:
    assert "max_model_len" in str(exc), exc
else:
    raise SystemExit("the start did not fail")
children = Path(f"/proc/{os.getpid()}/task/{os.getpid()}/children").read_text().split()
workers = [c for c in children if b"aot_workers" in Path(f"/proc/{c}/cmdline").read_bytes()]
print("CHILDREN", len(workers), "CLAIMS", len(list(Path(tempfile.gettempdir()).glob("mopt-aot-claims-*"))))
"""


def test_a_start_failing_after_its_workers_started_leaves_none_running(tmp_path):
    """max_model_len beyond the model's is refused once the weights are loaded, while the workers compile:
    they are stopped with the start, and their claims folder is removed."""
    (tmp_path / "tmp").mkdir()
    env = child_env(MOPT_COMPILE_CACHE_DIR=str(tmp_path / "cache"), MOPT_COMPILE_JOBS="8", TMPDIR=str(tmp_path / "tmp"))
    model = str(REPO / "benchmarks" / "configs" / "qwen3-0.6b")
    done = subprocess.run(
        [sys.executable, "-c", FAILING_CHILD, model], env=env, capture_output=True, text=True, timeout=600
    )
    assert done.returncode == 0, done.stderr[-4000:]
    assert re.search(r"CHILDREN 0 CLAIMS 0", done.stdout), done.stdout
