"""Host probe: OS family (for the fix commands), WSL and container, CPU, RAM, disk, and the
environment variables that change which GPU and libraries a program sees."""

from __future__ import annotations

import os
import platform
import shutil
from typing import Any

from model_optimizer.environment._util import read_text

CPU_FLAGS_OF_INTEREST = ("avx2", "avx512f", "avx512_bf16", "amx_bf16", "amx_tile")
ENV_OF_INTEREST = (
    "CUDA_VISIBLE_DEVICES",
    "CUDA_HOME",
    "LD_LIBRARY_PATH",
    "PYTORCH_CUDA_ALLOC_CONF",
    "HF_HOME",
    "NCCL_P2P_DISABLE",
    "CUDA_LAUNCH_BLOCKING",
    "TRITON_INTERPRET",
)


def probe_system() -> dict[str, Any]:
    """Everything about the host that is not the GPU."""
    os_release = _os_release()
    proc_version = read_text("/proc/version") or ""
    return {
        "os_release": os_release,
        "os_family": os_family(os_release, proc_version),
        "kernel": platform.release(),
        "proc_version": proc_version.strip(),
        "wsl": "microsoft" in proc_version.lower() or "WSL_DISTRO_NAME" in os.environ,
        "machine": platform.machine(),
        "python": platform.python_version(),
        "cpu": _cpu(),
        "memory": _memory(),
        "disk": _disk(),
        "env": {k: os.environ[k] for k in ENV_OF_INTEREST if k in os.environ},
    }


def os_family(os_release: dict[str, str], proc_version: str = "") -> str:
    """debian, rhel, wsl or other: which fix commands apply."""
    if "microsoft" in proc_version.lower():
        return "wsl"
    ids = (os_release.get("ID", "") + " " + os_release.get("ID_LIKE", "")).lower().split()
    if any(i in ("debian", "ubuntu") for i in ids):
        return "debian"
    if any(i in ("rhel", "fedora", "centos", "rocky", "almalinux") for i in ids):
        return "rhel"
    return "other"


def _os_release() -> dict[str, str]:
    out = {}
    for line in (read_text("/etc/os-release") or "").splitlines():
        key, sep, value = line.partition("=")
        if sep:
            out[key.strip()] = value.strip().strip('"')
    return {k: v for k, v in out.items() if k in ("ID", "ID_LIKE", "VERSION_ID", "PRETTY_NAME")}


def _cpu() -> dict[str, Any]:
    model, flags = None, set()
    for line in (read_text("/proc/cpuinfo") or "").splitlines():
        key, _, value = line.partition(":")
        if key.strip() == "model name" and model is None:
            model = value.strip()
        elif key.strip() == "flags" and not flags:
            flags = set(value.split())
    try:
        usable = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        usable = os.cpu_count()
    return {
        "model": model,
        "logical_cores": os.cpu_count(),
        "usable_cores": usable,
        "flags": {f: f in flags for f in CPU_FLAGS_OF_INTEREST},
    }


def _memory() -> dict[str, Any]:
    info = {}
    for line in (read_text("/proc/meminfo") or "").splitlines():
        key, _, value = line.partition(":")
        if key in ("MemTotal", "MemAvailable"):
            info[key] = int(value.split()[0]) * 1024
    limit = (read_text("/sys/fs/cgroup/memory.max") or "").strip()
    return {
        "total_bytes": info.get("MemTotal"),
        "available_bytes": info.get("MemAvailable"),
        "cgroup_limit_bytes": int(limit) if limit.isdigit() else None,
    }


def available_memory_bytes() -> int | None:
    """Bytes this process could still allocate: MemAvailable, or less under a cgroup limit (a container's);
    None where neither can be read."""
    memory = _memory()
    candidates = [memory["available_bytes"]]
    current = (read_text("/sys/fs/cgroup/memory.current") or "").strip()
    if memory["cgroup_limit_bytes"] is not None and current.isdigit():
        candidates.append(max(0, memory["cgroup_limit_bytes"] - int(current)))
    known = [c for c in candidates if c is not None]
    return min(known) if known else None


def _disk() -> dict[str, Any]:
    hf_home = os.environ.get("HF_HOME") or os.path.expanduser("~/.cache/huggingface")
    out = {}
    for label, path in (("cwd", os.getcwd()), ("hf_cache", hf_home)):
        probe_path = path
        while probe_path and not os.path.exists(probe_path):
            probe_path = os.path.dirname(probe_path)  # the cache may not exist yet: measure its parent
        try:
            usage = shutil.disk_usage(probe_path or "/")
            out[label] = {"path": path, "total_bytes": usage.total, "free_bytes": usage.free}
        except OSError as exc:
            out[label] = {"path": path, "error": str(exc)}
    return out
