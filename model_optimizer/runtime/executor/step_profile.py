"""Device-kernel profile of a worker's decode steps, for the tensor-parallel benchmark (benchmarks/tp.py).

The driver cannot profile kernels that run in its workers, so it asks rank 0 to: between a start
and a stop message, torch.profiler records the device kernels of every step (also those replayed
inside CUDA graphs), and the summary comes back as plain data: time per step in all-reduce kernels
(NCCL or a custom one) against all kernel time per step.
"""

from __future__ import annotations

from typing import Any

COMMUNICATION_MARKERS = ("nccl", "allreduce", "all_reduce", "one_shot", "two_shot", "multimem", "allgather")
"""Lower-case pieces of kernel names that are collectives rather than compute."""


def start_profile() -> Any:
    import torch

    activities = [torch.profiler.ProfilerActivity.CPU]
    if torch.cuda.is_available():
        activities.append(torch.profiler.ProfilerActivity.CUDA)
    profile = torch.profiler.profile(activities=activities)
    profile.start()
    return profile


def stop_profile(profile: Any, num_steps: int, trace_path: str | None = None) -> dict:
    """Per-step kernel times of the steps collected while `profile` ran; the trace saved when asked."""
    import torch

    if torch.cuda.is_available():
        torch.cuda.synchronize()
    profile.stop()
    if trace_path:
        profile.export_chrome_trace(trace_path)
    steps = max(num_steps, 1)
    kernels = [
        {"kernel": e.key[:120], "calls_per_step": e.count / steps, "us_per_step": e.device_time_total / steps}
        for e in profile.key_averages()
        if e.device_time_total > 0
    ]
    kernels.sort(key=lambda k: -k["us_per_step"])
    communication = [k for k in kernels if any(m in k["kernel"].lower() for m in COMMUNICATION_MARKERS)]
    return {
        "steps": num_steps,
        "kernel_us_per_step": sum(k["us_per_step"] for k in kernels),
        "all_reduce_us_per_step": sum(k["us_per_step"] for k in communication),
        "communication_kernels": communication[:10],
        "top_kernels": kernels[:25],
    }
