"""The figures the predictor divides by: memory bandwidth, matmul peak and memory size of the device.

From `mopt doctor --bench --json` output when given (measured), else the GPU's datasheet
(environment/data/gpus.json, by name or the GPU torch sees), else this CPU as measured once and
cached by environment/cpu_speed.py: the decode-shaped matmul's weight bytes per second for the
bandwidth and the prefill-shaped one's FLOP/s for the peak, in the dtype and on the threads the
engine will use here.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

CPU_BANDWIDTH_GBPS = 20.0
CPU_TFLOPS = 0.2
CPU_MEMORY_GIB = 16.0


@dataclass
class Hardware:
    name: str
    bandwidth_gbps: float
    """Memory bandwidth, GB/s (1e9 bytes)."""
    tflops: float
    """Dense matmul peak in the model's dtype, TFLOP/s."""
    memory_gib: float
    is_gpu: bool
    source: str
    h2d_gbps: float | None = None
    """Pinned host-to-device GB/s as `mopt doctor --bench` measured it (what weight offload pays per step);
    None: model/inspect/offload_plan.py's datasheet-based figure."""


def hardware_from_doctor(path: str | Path) -> Hardware:
    """Measured figures from a `mopt doctor --bench --json` file (the whole snapshot or its `bench` part)."""
    file = Path(path).expanduser()
    if not file.is_file():
        raise FileNotFoundError(f"hardware file {file} does not exist")
    try:
        data = json.loads(file.read_text())
    except json.JSONDecodeError as exc:
        raise ValueError(f"hardware file {file} is not JSON: {exc}") from None
    bench = data.get("bench", data) if isinstance(data, dict) else {}
    results = {r.get("name"): r for r in bench.get("results", []) if isinstance(r, dict) and "value" in r}
    if "d2d_copy" not in results or "matmul_bf16" not in results:
        raise ValueError(
            f"hardware file {file} has no d2d_copy and matmul_bf16 results: write it with "
            "`mopt doctor --bench --json > FILE`"
        )
    device = bench.get("device") or {}
    name = device.get("name", "measured")
    spec = _spec(name)
    memory = device.get("total_memory", 0) / (1 << 30) or (spec or {}).get("memory_gib", CPU_MEMORY_GIB)
    # a copy moves its bytes twice (read + write): that is what a decode step's weight read pays too
    return Hardware(
        name,
        float(results["d2d_copy"]["value"]),
        float(results["matmul_bf16"]["value"]),
        float(memory),
        name != "cpu",
        f"mopt doctor --bench ({file.name})",
        float(results["h2d_pinned"]["value"]) if "h2d_pinned" in results else None,
    )


def hardware_from_datasheet(name: str) -> Hardware:
    spec = _spec(name)
    if spec is None:
        from model_optimizer.environment.knowledge import load

        names = ", ".join(g["name"] for g in load("gpus")["gpus"])
        raise ValueError(f"--gpu {name!r} matches no datasheet; one of: {names}")
    return Hardware(
        spec["name"],
        float(spec["memory_bandwidth_gbps"]),
        float(spec["tflops"]["bf16"]),
        float(spec["memory_gib"]),
        True,
        f"datasheet ({spec['name']})",
    )


def detect_hardware(gpu: str | None = None, doctor_json: str | None = None) -> Hardware:
    """Measured figures if a doctor file is given, else the named or visible GPU's datasheet, else the CPU."""
    if doctor_json:
        return hardware_from_doctor(doctor_json)
    if gpu:
        return hardware_from_datasheet(gpu)
    name = _visible_gpu()
    if name and _spec(name):
        return hardware_from_datasheet(name)
    return hardware_from_cpu()


def hardware_from_cpu() -> Hardware:
    """This CPU's measured matmul figures (rough assumed ones if the measurement fails)."""
    try:
        from model_optimizer.environment.cpu_speed import cpu_speed

        speed = cpu_speed()
    except Exception:  # no torch, a read-only everything: the refit corrects the assumption
        return Hardware("cpu", CPU_BANDWIDTH_GBPS, CPU_TFLOPS, _ram_gib(), False, "assumed CPU figures (refitted)")
    threads = f"{speed.num_threads} thread{'s' if speed.num_threads > 1 else ''}"
    return Hardware(
        f"cpu ({speed.cpu_model}, {threads}, {speed.dtype})",
        speed.decode_gbps or CPU_BANDWIDTH_GBPS,
        speed.gflops / 1e3 or CPU_TFLOPS,
        _ram_gib(),
        False,
        f"matmuls measured on this CPU ({speed.source})",
    )


def _ram_gib() -> float:
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                return int(line.split()[1]) / (1 << 20)
    except (OSError, ValueError, IndexError):
        pass
    return CPU_MEMORY_GIB


def _spec(name: str | None) -> dict | None:
    from model_optimizer.environment.knowledge import gpu_spec

    return gpu_spec(name) if name else None


def _visible_gpu() -> str | None:
    try:
        import torch

        return torch.cuda.get_device_name(0) if torch.cuda.is_available() else None
    except Exception:  # no torch, no driver: no GPU
        return None
