"""Run the Triton kernels through the interpreter on the CPU (must be set before triton is imported)."""

import os

os.environ.setdefault("TRITON_INTERPRET", "1")
