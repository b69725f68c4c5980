"""Which device to run on, and host-to-device copies that never make the host wait for the GPU.

`pick_device` is the one place that turns `--device auto|cpu|cuda` into a torch device; on the CPU
it also sets torch's intra-op threads to the count this CPU measured fastest (environment/cpu_speed.py),
shared among tensor-parallel ranks, for the engine, the embedder and `mopt quantize` alike.

A copy from pageable memory, or `torch.tensor(..., device="cuda")`, waits for every kernel
already queued on the stream; with asynchronous steps that would serialise the host with the
GPU again. Here small host arrays are staged through pinned memory (the caching host allocator
keeps a block alive until its copy has run) and copied with `non_blocking=True`. Several arrays
of one step travel as one buffer in one copy, each starting on a 16-byte boundary: Triton and
inductor specialise kernels on pointer alignment, so an unaligned slice would compile a new
kernel variant in the middle of a run.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch


def to_device(
    values: torch.Tensor | np.ndarray | Sequence, device: torch.device, dtype: torch.dtype | None = None
) -> torch.Tensor:
    """`values` (a CPU tensor, array or list) on `device`, converted to `dtype`; on CUDA without a stream sync."""
    tensor = values if isinstance(values, torch.Tensor) else torch.as_tensor(np.asarray(values))
    if dtype is not None:
        tensor = tensor.to(dtype)
    if device.type != "cuda":
        return tensor.to(device)
    return tensor.pin_memory().to(device, non_blocking=True)


def to_device_packed(
    arrays: Sequence[np.ndarray | Sequence[int]], dtype: type, device: torch.device
) -> list[torch.Tensor]:
    """Each array flattened to `dtype` on `device`, all in one copy, each starting 16-byte aligned."""
    per_16_bytes = 16 // np.dtype(dtype).itemsize
    arrays = [np.asarray(a, dtype=dtype) for a in arrays]  # lists are converted once
    sizes = [a.size for a in arrays]
    starts = np.cumsum([0] + [-(-n // per_16_bytes) * per_16_bytes for n in sizes]).tolist()
    packed = np.zeros(starts[-1], dtype=dtype)
    for array, start, size in zip(arrays, starts, sizes):
        packed[start : start + size] = array.ravel()
    tensor = to_device(torch.from_numpy(packed), device)
    return [tensor[start : start + size] for start, size in zip(starts, sizes)]


def pick_device(requested: str) -> torch.device:
    if requested == "cuda" and not torch.cuda.is_available():
        raise ValueError("device cuda was requested but torch sees no CUDA GPU (run `mopt doctor`)")
    if requested == "auto":
        device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    else:
        device = torch.device(requested)
    if device.type == "cpu":
        from model_optimizer.environment.cpu_speed import apply_cpu_threads
        from model_optimizer.runtime.distributed import get_tp

        apply_cpu_threads(share=get_tp().size)
    return device
