"""The ahead-of-time build (`mopt compile-cache build`) keys Gemma 2's attention soft-capping: each cap is its
own variant of the attention kernel (a Triton constexpr, so part of Triton's cache key and of the build's
claims), with nothing to add in kernels/aot.py. Run in a subprocess without TRITON_INTERPRET (the
interpreter replaces the JIT)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[3]
WALK = """
import torch
from model_optimizer.runtime.kernels import aot
from model_optimizer.runtime.kernels.paged_attention import paged_attention

meta = torch.device("meta")
q = torch.empty(4, 4, 32, dtype=torch.bfloat16, device=meta)
cache = torch.empty(2, 8, 16, 2, 32, dtype=torch.bfloat16, device=meta)
qsl, lens = torch.empty(5, dtype=torch.int32, device=meta), torch.empty(4, dtype=torch.int32, device=meta)
tables = torch.empty(4, 2, dtype=torch.int32, device=meta)

def walk(caps):
    for cap in caps:
        paged_attention(q, cache, qsl, lens, tables, 0.1, max_query_len=1, max_seq_len=32, num_splits=1, softcap=cap)

with aot.compile_only():
    print(aot.count_variants(lambda: walk([None, 50.0, 50.0, 30.0, None])))
"""


@pytest.mark.slow  # a subprocess that imports torch and Triton
def test_each_softcap_is_its_own_kernel_variant():
    pytest.importorskip("triton.backends.compiler")
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"} | {"PYTHONPATH": str(REPO)}
    result = subprocess.run([sys.executable, "-c", WALK], env=env, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stdout.split() == ["3"]  # none, 50 and 30
