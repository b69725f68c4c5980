"""Run the Triton kernels through the interpreter on the CPU (must be set before triton is imported).

On a CUDA machine the variable is left alone: it would also send tests/gpu through the interpreter."""

import os

import torch

if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")
