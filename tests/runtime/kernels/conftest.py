"""Run the Triton kernels through the interpreter on the CPU (must be set before triton is imported).

On a CUDA machine the variable is left alone: it would also send tests/gpu through the interpreter.
There the CPU-tensor tests of this folder are skipped (tests/gpu/test_kernels_gpu.py covers the
kernels on CUDA); only the sm_90 compile check runs.
"""

import os

import pytest
import torch

if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")


def pytest_collection_modifyitems(config, items):
    if os.environ.get("TRITON_INTERPRET") == "1":
        return
    skip = pytest.mark.skip(reason="CPU-tensor kernel tests need TRITON_INTERPRET=1")
    here = os.path.dirname(os.path.abspath(__file__))
    for item in items:
        if str(item.fspath).startswith(here) and "compile_sm90" not in item.nodeid:
            item.add_marker(skip)
