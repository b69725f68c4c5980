"""On a GPU: a context retained early is the one torch then uses."""

from __future__ import annotations

import subprocess
import sys

CHILD = """
from model_optimizer.runtime.cuda_context import create_in_background
thread = create_in_background(0)
import torch
thread.join()
x = torch.arange(4, device="cuda", dtype=torch.float32)
free, total = torch.cuda.mem_get_info()
print(float(x.sum()), 0 < free <= total)
"""


def test_torch_runs_on_the_context_made_before_its_import():
    out = subprocess.run([sys.executable, "-c", CHILD], capture_output=True, text=True, check=True, timeout=120).stdout
    assert out.split() == ["6.0", "True"]
