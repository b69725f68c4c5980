"""Programmatic dependent launch (Hopper and later): a kernel starts while the one before it finishes.

A decode step at batch 1 is a chain of a few hundred short kernels, each waiting for the one before it
to drain and then paying its own launch and the first trip to memory. Launched with PDL, a kernel's
programs may start as soon as every program of the kernel before it has released it (the
`griddepcontrol` PTX instructions, inside CUDA graphs too): what does not depend on the previous
kernel (a matmul's first weight tile, read-only weights) is read before the wait, which blocks until the
previous kernel has finished and its writes are visible; everything that reads what an earlier kernel
wrote, and every store and atomic, comes after it.

The rule every kernel launched with `enabled(...)` follows: `wait_then_release` before its first
dependent read or any write (only read-only weights may be read before it). Releasing only
after waiting keeps at most one kernel waiting behind a running one, so waiting programs never crowd
out the programs that must finish first. Where PDL is off (older GPUs, the interpreter, MOPT_PDL=0,
a Triton without it) the same kernels compile without the instructions and launch as before.
"""

from __future__ import annotations

import os

import torch
import triton
import triton.language as tl

from model_optimizer.runtime.kernels import aot

try:
    from triton.language.extra.cuda import gdc_launch_dependents, gdc_wait

    AVAILABLE = True
    """Whether this Triton has the griddepcontrol instructions and the `launch_pdl` launch option."""
except ImportError:  # pragma: no cover - Triton before 3.4
    AVAILABLE = False

    @triton.jit
    def gdc_wait():
        pass

    @triton.jit
    def gdc_launch_dependents():
        pass


def enabled(device_index: int | None) -> bool:
    """Whether kernels on this GPU (or the ahead-of-time target) launch with PDL: compute capability
    9.0 or later, a Triton that has it, not the interpreter, and MOPT_PDL not "0". Asked at every
    launch, so answered once per device and target (the environment as it was then). MOPT_PDL changes
    the kernels compiled: it is one of the compile-ahead marker's KERNEL_SWITCHES (runner/compile_ahead.py)."""
    key = (device_index or 0, aot.building())
    answer = _capable.get(key)
    if answer is None:
        answer = _capable[key] = (
            AVAILABLE
            and os.environ.get("TRITON_INTERPRET") != "1"
            and os.environ.get("MOPT_PDL", "1") != "0"
            and aot.device_facts(device_index)[2] >= (9, 0)
        )
    return answer


_capable: dict[tuple[int, aot.AotTarget | None], bool] = {}


@triton.jit
def wait_then_release(PDL: tl.constexpr):
    """Block until the kernel launched before this one has finished and its writes are visible, then
    let the next kernel's programs start (they wait here in turn for this one to finish)."""
    if PDL:
        gdc_wait()
        gdc_launch_dependents()


def options(tensor: torch.Tensor) -> dict[str, bool]:
    """The launch arguments of a kernel that follows the rule above, for a launch on `tensor`'s device:
    its `PDL` constexpr and Triton's `launch_pdl` option, both True where `enabled`."""
    on = aot.on_gpu(tensor) and enabled(tensor.device.index)
    return {"PDL": on, "launch_pdl": on}
