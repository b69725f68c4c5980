"""NVML probe through nvidia-ml-py (imported as `pynvml`): driver, CUDA driver version and,
per GPU, memory, PCIe link, ECC, power, clocks, throttle reasons, temperature, processes, MIG.

Every field is read on its own: a field the GPU does not support is listed under
`unavailable` with NVML's reason, and the rest is still reported."""

from __future__ import annotations

from typing import Any, Callable

# Clock-event ("throttle") reason bits, as NVML defines them.
CLOCK_EVENT_REASONS = {
    0x1: "gpu_idle",
    0x2: "applications_clocks_setting",
    0x4: "sw_power_cap",
    0x8: "hw_slowdown",
    0x10: "sync_boost",
    0x20: "sw_thermal_slowdown",
    0x40: "hw_thermal_slowdown",
    0x80: "hw_power_brake_slowdown",
    0x100: "display_clock_setting",
}


def probe_nvml() -> dict[str, Any]:
    """Read everything NVML offers without root. Raises when NVML itself cannot start;
    the probe runner records that (its type, e.g. NVMLError_LibraryNotFound, is the diagnosis)."""
    import pynvml

    pynvml.nvmlInit()
    try:
        out: dict[str, Any] = {"unavailable": {}}
        get = _reader(out["unavailable"])
        out["driver_version"] = get("driver_version", pynvml.nvmlSystemGetDriverVersion)
        out["cuda_driver_version"] = get("cuda_driver_version", pynvml.nvmlSystemGetCudaDriverVersion_v2)
        out["nvml_version"] = get("nvml_version", pynvml.nvmlSystemGetNVMLVersion)
        count = pynvml.nvmlDeviceGetCount()
        out["device_count"] = count
        out["devices"] = [_device(pynvml, index) for index in range(count)]
        return out
    finally:
        try:
            pynvml.nvmlShutdown()
        except Exception:
            pass


def _device(nv: Any, index: int) -> dict[str, Any]:
    handle = nv.nvmlDeviceGetHandleByIndex(index)
    dev: dict[str, Any] = {"index": index, "unavailable": {}}
    get = _reader(dev["unavailable"])
    dev["name"] = get("name", nv.nvmlDeviceGetName, handle)
    dev["uuid"] = get("uuid", nv.nvmlDeviceGetUUID, handle)
    pci = get("pci", nv.nvmlDeviceGetPciInfo, handle)
    dev["pci_bus_id"] = _text(getattr(pci, "busId", None)) if pci else None
    dev["vbios_version"] = get("vbios_version", nv.nvmlDeviceGetVbiosVersion, handle)
    cc = get("compute_capability", nv.nvmlDeviceGetCudaComputeCapability, handle)
    dev["compute_capability"] = f"{cc[0]}.{cc[1]}" if cc else None
    dev["memory"] = _memory(nv, handle, get)
    dev["pcie"] = {
        "current_gen": get("pcie.current_gen", nv.nvmlDeviceGetCurrPcieLinkGeneration, handle),
        "max_gen": get("pcie.max_gen", nv.nvmlDeviceGetMaxPcieLinkGeneration, handle),
        "gpu_max_gen": get("pcie.gpu_max_gen", nv.nvmlDeviceGetGpuMaxPcieLinkGeneration, handle),
        "current_width": get("pcie.current_width", nv.nvmlDeviceGetCurrPcieLinkWidth, handle),
        "max_width": get("pcie.max_width", nv.nvmlDeviceGetMaxPcieLinkWidth, handle),
        "replay_counter": get("pcie.replay_counter", nv.nvmlDeviceGetPcieReplayCounter, handle),
    }
    dev["ecc"] = _ecc(nv, handle, get)
    dev["persistence_mode"] = _flag(get("persistence_mode", nv.nvmlDeviceGetPersistenceMode, handle))
    dev["power"] = _power(nv, handle, get)
    dev["clocks_mhz"] = {
        "sm": get("clocks.sm", nv.nvmlDeviceGetClockInfo, handle, nv.NVML_CLOCK_SM),
        "mem": get("clocks.mem", nv.nvmlDeviceGetClockInfo, handle, nv.NVML_CLOCK_MEM),
        "sm_max": get("clocks.sm_max", nv.nvmlDeviceGetMaxClockInfo, handle, nv.NVML_CLOCK_SM),
        "mem_max": get("clocks.mem_max", nv.nvmlDeviceGetMaxClockInfo, handle, nv.NVML_CLOCK_MEM),
    }
    reasons = get("clock_event_reasons", nv.nvmlDeviceGetCurrentClocksEventReasons, handle)
    dev["clock_event_reasons_mask"] = reasons
    dev["clock_event_reasons"] = [name for bit, name in CLOCK_EVENT_REASONS.items() if reasons and reasons & bit]
    dev["temperature_c"] = get("temperature", nv.nvmlDeviceGetTemperature, handle, nv.NVML_TEMPERATURE_GPU)
    dev["temperature_slowdown_c"] = get(
        "temperature_slowdown", nv.nvmlDeviceGetTemperatureThreshold, handle, nv.NVML_TEMPERATURE_THRESHOLD_SLOWDOWN
    )
    util = get("utilization", nv.nvmlDeviceGetUtilizationRates, handle)
    dev["utilization_pct"] = {"gpu": util.gpu, "memory": util.memory} if util else None
    dev["processes"] = _processes(nv, handle, get)
    mig = get("mig_mode", nv.nvmlDeviceGetMigMode, handle)
    dev["mig"] = {"current": _flag(mig[0]), "pending": _flag(mig[1])} if mig else None
    dev["compute_mode"] = get("compute_mode", nv.nvmlDeviceGetComputeMode, handle)
    return dev


def _memory(nv: Any, handle: Any, get: Callable[..., Any]) -> dict[str, Any] | None:
    mem = get("memory_v2", nv.nvmlDeviceGetMemoryInfo, handle, nv.nvmlMemory_v2)
    if mem is None:
        mem = get("memory", nv.nvmlDeviceGetMemoryInfo, handle)
    if mem is None:
        return None
    return {"total": mem.total, "free": mem.free, "used": mem.used, "reserved": getattr(mem, "reserved", None)}


def _ecc(nv: Any, handle: Any, get: Callable[..., Any]) -> dict[str, Any]:
    mode = get("ecc.mode", nv.nvmlDeviceGetEccMode, handle)
    ecc: dict[str, Any] = {"current": _flag(mode[0]) if mode else None, "pending": _flag(mode[1]) if mode else None}
    kinds = {"corrected": nv.NVML_MEMORY_ERROR_TYPE_CORRECTED, "uncorrected": nv.NVML_MEMORY_ERROR_TYPE_UNCORRECTED}
    counters = {"volatile": nv.NVML_VOLATILE_ECC, "aggregate": nv.NVML_AGGREGATE_ECC}
    if ecc["current"]:
        for cname, counter in counters.items():
            for kname, kind in kinds.items():
                ecc[f"{cname}_{kname}"] = get(f"ecc.{cname}_{kname}", nv.nvmlDeviceGetTotalEccErrors, handle, kind, counter)
    rows = get("ecc.remapped_rows", nv.nvmlDeviceGetRemappedRows, handle)
    if rows:
        ecc["remapped_rows"] = {
            "correctable": rows[0], "uncorrectable": rows[1], "pending": bool(rows[2]), "failure": bool(rows[3])
        }
    pending = get("ecc.retired_pages_pending", nv.nvmlDeviceGetRetiredPagesPendingStatus, handle)
    ecc["retired_pages_pending"] = _flag(pending) if pending is not None else None
    return ecc


def _power(nv: Any, handle: Any, get: Callable[..., Any]) -> dict[str, Any]:
    def watts(value: Any) -> float | None:
        return round(value / 1000.0, 1) if isinstance(value, (int, float)) else None

    limits = get("power.constraints", nv.nvmlDeviceGetPowerManagementLimitConstraints, handle)
    return {
        "usage_w": watts(get("power.usage", nv.nvmlDeviceGetPowerUsage, handle)),
        "limit_w": watts(get("power.limit", nv.nvmlDeviceGetPowerManagementLimit, handle)),
        "enforced_limit_w": watts(get("power.enforced_limit", nv.nvmlDeviceGetEnforcedPowerLimit, handle)),
        "default_limit_w": watts(get("power.default_limit", nv.nvmlDeviceGetPowerManagementDefaultLimit, handle)),
        "min_limit_w": watts(limits[0]) if limits else None,
        "max_limit_w": watts(limits[1]) if limits else None,
    }


def _processes(nv: Any, handle: Any, get: Callable[..., Any]) -> list[dict[str, Any]]:
    procs = []
    for kind, fn in (("compute", nv.nvmlDeviceGetComputeRunningProcesses), ("graphics", nv.nvmlDeviceGetGraphicsRunningProcesses)):
        for p in get(f"processes.{kind}", fn, handle) or []:
            used = getattr(p, "usedGpuMemory", None)
            procs.append({"pid": p.pid, "kind": kind, "used_bytes": used, "name": _process_name(p.pid)})
    return procs


def _process_name(pid: int) -> str | None:
    try:
        with open(f"/proc/{pid}/comm", encoding="utf-8") as fh:
            return fh.read().strip()
    except OSError:
        return None  # another container's process, or gone


def _reader(unavailable: dict[str, str]) -> Callable[..., Any]:
    """A call wrapper that stores NVML's reason under `unavailable[field]` and returns None."""

    def get(field: str, fn: Callable[..., Any], *args: Any) -> Any:
        try:
            return _text(fn(*args))
        except Exception as exc:
            unavailable[field] = type(exc).__name__.replace("NVMLError_", "") or str(exc)
            return None

    return get


def _text(value: Any) -> Any:
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else value


def _flag(value: Any) -> bool | None:
    return None if value is None else bool(value)
