"""Recommended engine settings for this machine, for `mopt serve` and the tuner.

    from model_optimizer.environment import recommended_settings, capture_snapshot
    settings = recommended_settings(capture_snapshot())
    EngineConfig(dtype=settings["dtype"], gpu_memory_utilization=settings["gpu_memory_utilization"] or 0.9, ...)

Keys that share a name with an EngineConfig field (device, dtype, kv_cache_dtype,
gpu_memory_utilization) take that field's values."""

from __future__ import annotations

import math
from typing import Any

from model_optimizer.environment.knowledge import cc_at_least, version_tuple
from model_optimizer.environment.snapshot import Snapshot

GIB = 1 << 30
DEFAULT_UTILIZATION = 0.9  # EngineConfig's default
HEADROOM = 0.03  # of total memory, kept free for this process's CUDA context and cuBLAS workspaces


def recommended_settings(snapshot: dict[str, Any] | Snapshot) -> dict[str, Any]:
    """dtype, fp8 availability and a gpu_memory_utilization that fits the memory free now."""
    snap = snapshot if isinstance(snapshot, Snapshot) else Snapshot(snapshot)
    if not snap.gpu_usable:
        return _cpu_settings(snap.raw.get("cpu_speed"))
    gpus = _gpus(snap)
    ccs = [g["compute_capability"] for g in gpus if g["compute_capability"]]
    lowest_cc = min(ccs, key=version_tuple) if ccs else None
    # the compute capability decides: torch.cuda.is_bf16_supported() also says yes on Volta and Turing, where
    # bf16 runs emulated without tensor cores, and it asks about the current device only
    bf16 = cc_at_least(lowest_cc, "8.0") if lowest_cc else bool(snap.torch.get("bf16_supported"))
    fp8 = (
        cc_at_least(lowest_cc, "8.9")
        and bool(snap.torch.get("has_fp8_dtypes"))
        and bool(snap.torch.get("has_scaled_mm"))
    )
    notes = [
        "bf16: same range as fp32, no overflow in long contexts"
        if bf16
        else f"float16: this GPU (compute capability {lowest_cc}) has no bf16; watch for overflow in models trained in bf16"
    ]
    if fp8:
        notes.append(
            "fp8 (e4m3) available: --kv-cache-dtype fp8 halves KV-cache memory; fp8 weights double matmul throughput"
        )
    utilization, free_gib, total_gib = _utilization(gpus)
    if utilization is not None and utilization < DEFAULT_UTILIZATION:
        notes.append(
            f"gpu_memory_utilization lowered to {utilization} because other processes hold memory ({free_gib:.1f} of {total_gib:.1f} GiB free)"
        )
    return {
        "device": "cuda",
        "dtype": "bfloat16" if bf16 else "float16",
        "kv_cache_dtype": "auto",
        "fp8_available": fp8,
        "bf16_available": bf16,
        "num_threads": None,
        "gpu_memory_utilization": utilization,
        "gpu_memory_free_gib": round(free_gib, 2) if free_gib is not None else None,
        "gpu_memory_total_gib": round(total_gib, 2) if total_gib is not None else None,
        "compute_capability": lowest_cc,
        "gpu_name": gpus[0]["name"] if gpus else None,
        "num_gpus": len(gpus),
        "notes": notes,
    }


def _cpu_settings(speed: dict[str, Any] | None) -> dict[str, Any]:
    """On the CPU: float32 unless this CPU measured bfloat16 faster (environment/cpu_speed.py, which
    `mopt doctor` records as the snapshot's cpu_speed), and the thread count it measured fastest."""
    dtype = (speed or {}).get("dtype", "float32")
    notes = ["No usable GPU: run on the CPU (fp16 matmuls are slow or unsupported on CPUs)."]
    settings: dict[str, Any] = {  # the GPU's keys too, None: `mopt doctor --json` has one shape
        "device": "cpu",
        "dtype": dtype,
        "kv_cache_dtype": "auto",
        "fp8_available": False,
        "bf16_available": dtype == "bfloat16",
        "num_threads": (speed or {}).get("num_threads"),
        "gpu_memory_utilization": None,
        "gpu_memory_free_gib": None,
        "gpu_memory_total_gib": None,
        "compute_capability": None,
        "gpu_name": None,
        "num_gpus": 0,
    }
    if speed:
        timings = ", ".join(f"{k} {v:.1f} ms" for k, v in (speed.get("timings_ms") or {}).items())
        notes.append(
            f"measured on this CPU ({timings}): bfloat16 checkpoints run in {dtype} with --dtype auto, on "
            f"{speed.get('num_threads')} intra-op thread(s); the figures are cached, `mopt doctor --remeasure-cpu` "
            "measures again"
        )
    return settings | {"notes": notes}


def _gpus(snap: Snapshot) -> list[dict[str, Any]]:
    """Per GPU: name, compute capability, free and total bytes; NVML first, torch as fallback."""
    if snap.devices:
        return [
            {
                "name": d.get("name"),
                "compute_capability": d.get("compute_capability"),
                "free": (d.get("memory") or {}).get("free"),
                "total": (d.get("memory") or {}).get("total"),
            }
            for d in snap.devices
        ]
    return [
        {
            "name": d.get("name"),
            "compute_capability": d.get("compute_capability"),
            "free": d.get("free_memory"),
            "total": d.get("total_memory"),
        }
        for d in snap.torch.get("devices") or []
    ]


def _utilization(gpus: list[dict[str, Any]]) -> tuple[float | None, float | None, float | None]:
    """The largest fraction (in steps of 0.01, at most the default) free on every GPU, less headroom."""
    fractions = [
        (g["free"] / g["total"], g["free"], g["total"]) for g in gpus if g.get("free") is not None and g.get("total")
    ]
    if not fractions:
        return DEFAULT_UTILIZATION, None, None
    fraction, free, total = min(fractions)
    utilization = math.floor(max(fraction - HEADROOM, 0.0) * 100) / 100
    return min(DEFAULT_UTILIZATION, max(utilization, 0.01)), free / GIB, total / GIB
