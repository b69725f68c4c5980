"""One way to capture a CUDA graph in this engine: `torch.cuda.graph` with two guards.

- **Thread-local error mode.** The engine captures while other threads of the process run: the mask
  fill of structured outputs, a tokenizer pool, Triton's key hashing at start-up, another engine's
  output threads in the same process (tests, notebooks). In torch's default "global" mode a call
  that CUDA deems unsafe during a capture (an event or stream query, a synchronising copy) made by
  *any* thread invalidates the capture, and the engine start fails with "operation failed due to a
  previous error during capture". A GPU test run met exactly that, once in three (self-drafting
  speculation, built after other engines in the same process). "thread_local" limits the check to
  the capturing thread, whose own work stays checked.
- **No garbage collection inside the capture.** `torch.cuda.graph` collects once before it begins;
  a collection triggered in the middle would run finalizers of earlier engines' objects (their CUDA
  events, pinned buffers, graphs) on the capturing thread, whose CUDA calls are then inside the
  capture.
"""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import torch


@contextmanager
def capturing(graph: torch.cuda.CUDAGraph, pool: Any = None) -> Iterator[None]:
    """Capture the block's GPU work into `graph` (sharing the memory `pool` when given), guarded as the
    module docstring says."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        with torch.cuda.graph(graph, pool=pool, capture_error_mode="thread_local"):
            yield
    finally:
        if enabled:
            gc.enable()
