"""The GPU a memory plan is sized for: a datasheet's capacity by name, or the live GPU's total and free memory.

memory_plan.py fits the engine's KV cache into it; `mopt inspect --gpu` names it.
"""

from __future__ import annotations

from dataclasses import dataclass

MIB = 1 << 20
CUDA_CONTEXT_BYTES = 600 * MIB
"""Memory the CUDA context takes outside torch's allocator; only bounds the plan when
gpu_memory_utilization is near 1 and free memory, not the share, limits the cache."""


@dataclass
class GpuMemory:
    name: str
    total_bytes: int
    free_bytes: int | None = None
    """Free memory now (live GPUs); None: total minus the CUDA context is assumed."""
    source: str = "datasheet"


def gpu_memory(spec: str, index: int = 0) -> GpuMemory:
    """`live`: the GPU this process sees (torch, else NVML); otherwise a datasheet name (`H200`, `A100 80GB`)."""
    if spec == "live":
        return _live_gpu(index)
    from model_optimizer.environment.knowledge import gpu_spec, load

    entry = gpu_spec(spec)
    if entry is None:
        names = ", ".join(g["name"] for g in load("gpus")["gpus"])
        raise ValueError(f"--gpu {spec!r} matches no datasheet; use 'live' or one of: {names}")
    return GpuMemory(entry["name"], int(entry["memory_gib"] * (1 << 30)), None, "datasheet")


def _live_gpu(index: int) -> GpuMemory:
    import torch

    if torch.cuda.is_available():
        free, total = torch.cuda.mem_get_info(index)
        return GpuMemory(
            torch.cuda.get_device_name(index), int(total), int(free), "torch (live)"
        )  # free already net of our context
    try:
        import pynvml

        pynvml.nvmlInit()
        handle = pynvml.nvmlDeviceGetHandleByIndex(index)
        mem = pynvml.nvmlDeviceGetMemoryInfo(handle)
        name = pynvml.nvmlDeviceGetName(handle)
        return GpuMemory(
            name.decode() if isinstance(name, bytes) else name,
            int(mem.total),
            int(mem.free) - CUDA_CONTEXT_BYTES,
            "NVML (live)",
        )
    except Exception as exc:  # no driver, no library: say so in words
        raise ValueError(
            f"--gpu live: no GPU visible to torch or NVML ({type(exc).__name__}: {exc}); name one, e.g. --gpu H200"
        ) from None
