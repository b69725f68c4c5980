"""Run chains of small element-wise ops as one hand-written Triton kernel on the GPU.

A decode step of a small model is hundreds of tiny element-wise kernels (RMSNorm alone is seven
in float32), and inside a CUDA graph each still costs a fixed time of its own. As one kernel each
chain reads its inputs once and writes its outputs once. Before fusion they were about half of a
small decode step (benchmarks/profile_step.py; README "Where the time goes", "Earlier steps").

The kernels live in kernels/fused_ops.py. torch.compile did this job before, but dynamo traces the
chains again in every new process and importing inductor takes seconds: most of a cold start.
CPU tensors take the eager function, so the CPU reference path and its exactness against
transformers are untouched; so do shapes or dtypes a kernel does not take.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import TypeVar

import torch

from model_optimizer.runtime.kernels import aot, triton_kernel

F = TypeVar("F", bound=Callable)


def use_kernel(tensor: torch.Tensor) -> bool:
    """Whether a chain whose first argument is `tensor` runs as its Triton kernel: CUDA tensors do (and
    meta tensors while compiling ahead of time, kernels/aot.py)."""
    return aot.on_gpu(tensor)


def fused(kernel: str) -> Callable[[F], F]:
    """Run the decorated eager function as `kernels.fused_ops.<kernel>` where that kernel takes its
    arguments (`fused_ops.supports_<kernel>` says so), else eagerly. The eager function stays reachable
    as `__wrapped__`: the CPU path and the kernel's yardstick. Use as `@fused("silu_and_mul")`."""

    def wrap(fn: F) -> F:
        @functools.wraps(fn)
        def run(*args, **kwargs):
            if use_kernel(args[0]):
                launch = triton_kernel("fused_ops", kernel)  # None where Triton cannot be imported
                if launch is not None and triton_kernel("fused_ops", f"supports_{kernel}")(*args, **kwargs):
                    return launch(*args, **kwargs)
            return fn(*args, **kwargs)

        return run  # type: ignore[return-value]

    return wrap
