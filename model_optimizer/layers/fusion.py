"""Fuse chains of small element-wise ops into one kernel on the GPU with torch.compile.

A decode step of a small model is hundreds of tiny element-wise kernels (RMSNorm alone is seven
in float32); inside a CUDA graph each still costs 1-3 us. Compiled, each chain becomes one Triton
kernel. Measured on the H200 before fusion (benchmarks/profile_step.py): ~365 element-wise
launches per step, about half the decode step time at batch 32. CPU tensors take the eager function,
so the CPU reference path and its exactness against transformers are untouched.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Callable
from typing import TypeVar

import torch

F = TypeVar("F", bound=Callable)

NO_COMPILE_ENV = "MOPT_NO_COMPILE"
"""MOPT_NO_COMPILE=1 runs every fused chain eagerly on the GPU too: set by the engine under
enforce_eager (compile_cache.py), so torch._inductor is never imported, and by device probes that
compare against the uncompiled ops (scripts/device/). Read on each call: the engine sets it after
this module was imported."""


def compiling() -> bool:
    """Whether fused chains on CUDA tensors run through torch.compile now."""
    return os.environ.get(NO_COMPILE_ENV) != "1"


def fused(fn: F | None = None, *, token_args: int = 1) -> F | Callable[[F], F]:
    """Run `fn` compiled on CUDA tensors and eagerly elsewhere. Use as `@fused` or `@fused(token_args=n)`.

    The first `token_args` positional arguments are tensors whose first dimension counts tokens: that
    dimension alone is compiled as dynamic, so one kernel serves every batch. The others (hidden size,
    heads, head size) stay fixed numbers in the kernel, which lets Triton prove rows contiguous and
    load 16 bytes at a time. H200, 32k tokens (benchmarks/fused_ops.py): SiLU-and-mul 149 us against
    341 us with every dimension dynamic (dynamic=True), add + RMSNorm 70 against 98 us."""
    if fn is None:
        return functools.partial(fused, token_args=token_args)
    compiled: Callable | None = None

    @functools.wraps(fn)
    def run(*args, **kwargs):
        nonlocal compiled
        if not args[0].is_cuda or not compiling():
            return fn(*args, **kwargs)
        if compiled is None:  # dynamic=False: other sizes stay fixed even after a second model's differ
            compiled = torch.compile(fn, fullgraph=True, dynamic=False)
        for tensor in args[:token_args]:
            torch._dynamo.maybe_mark_dynamic(tensor, 0)
        return compiled(*args, **kwargs)

    return run
