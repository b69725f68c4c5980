"""The probes and the snapshot they make together.

Each probe is an independent function returning plain data. `capture_snapshot` runs them all at
once, each in its own daemon thread with a deadline, and stores per probe
{"ok", "data" | "error", "error_type", "elapsed_s"}: a failing or hanging probe is a finding, never
a crash. The snapshot is plain JSON, so rules can be tested on snapshots recorded elsewhere."""

from __future__ import annotations

import datetime as _dt
from collections.abc import Callable
from typing import Any

from model_optimizer.environment._util import call_with_timeout
from model_optimizer.environment.probes.kernel import (
    probe_dev_nodes,
    probe_driver_proc,
    probe_modules,
    probe_pci,
    probe_secure_boot,
)
from model_optimizer.environment.probes.nvml import probe_nvml
from model_optimizer.environment.probes.software import (
    probe_bytecode,
    probe_container_toolkit,
    probe_libcuda,
    probe_nvidia_smi,
    probe_python_packages,
)
from model_optimizer.environment.probes.system import probe_system
from model_optimizer.environment.probes.torch_env import probe_torch

SCHEMA_VERSION = 1

# name -> (function, timeout in seconds)
PROBES: dict[str, tuple[Callable[[], Any], float]] = {
    "system": (probe_system, 10),
    "nvml": (probe_nvml, 20),
    "nvidia_smi": (probe_nvidia_smi, 35),
    "torch": (probe_torch, 100),
    "driver_proc": (probe_driver_proc, 5),
    "modules": (probe_modules, 5),
    "dev_nodes": (probe_dev_nodes, 5),
    "pci": (probe_pci, 15),
    "secure_boot": (probe_secure_boot, 25),
    "libcuda": (probe_libcuda, 10),
    "container_toolkit": (probe_container_toolkit, 40),
    "python_packages": (probe_python_packages, 10),
    "bytecode": (probe_bytecode, 10),
}
LATE_PROBES = ("torch",)


def capture_snapshot(names: list[str] | None = None, timeout_scale: float = 1.0) -> dict[str, Any]:
    """Run the named probes (all by default) concurrently, torch last; return the snapshot."""
    import threading

    selected = names or list(PROBES)
    unknown = [n for n in selected if n not in PROBES]
    if unknown:
        raise ValueError(f"unknown probe(s) {', '.join(unknown)}; known: {', '.join(PROBES)}")
    results: dict[str, Any] = {}

    def run(name: str) -> None:
        fn, timeout = PROBES[name]
        results[name] = call_with_timeout(fn, timeout * timeout_scale)

    # torch creates a CUDA context (memory, a process on the GPU): read NVML and nvidia-smi first,
    # so they record the GPU as it was before the doctor touched it
    first = [n for n in selected if n not in LATE_PROBES]
    for phase in (first, [n for n in selected if n in LATE_PROBES]):
        threads = [threading.Thread(target=run, args=(n,), daemon=True) for n in phase]
        for t in threads:
            t.start()
        for t in threads:
            t.join()  # each run() returns by its own deadline
    return {
        "schema_version": SCHEMA_VERSION,
        "captured_at": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        "probes": {name: results[name] for name in selected},
    }
