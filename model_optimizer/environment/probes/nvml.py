"""NVML probe through nvidia-ml-py (imported as `pynvml`): driver, CUDA driver version and,
per GPU, memory, PCIe link, ECC, power, clocks, throttle reasons, temperature, processes, MIG.

Every field is read on its own, inside a lambda so that even a function or constant missing
from an older nvidia-ml-py only costs that field: it is listed under `unavailable` with the
reason (NotSupported, NoPermission, AttributeError...), and the rest is still reported."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

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
    import pynvml as nv

    nv.nvmlInit()
    try:
        out: dict[str, Any] = {"unavailable": {}}
        get = _reader(out["unavailable"])
        out["driver_version"] = get("driver_version", lambda: nv.nvmlSystemGetDriverVersion())
        out["cuda_driver_version"] = get("cuda_driver_version", lambda: nv.nvmlSystemGetCudaDriverVersion_v2())
        out["nvml_version"] = get("nvml_version", lambda: nv.nvmlSystemGetNVMLVersion())
        count = nv.nvmlDeviceGetCount()
        out["device_count"] = count
        out["devices"] = [_device_or_error(nv, index) for index in range(count)]
        return out
    finally:
        try:
            nv.nvmlShutdown()
        except Exception:
            pass


def _device_or_error(nv: Any, index: int) -> dict[str, Any]:
    """One GPU's record; a GPU whose handle cannot be had (GPU lost, needs reset) is recorded as such."""
    try:
        handle = nv.nvmlDeviceGetHandleByIndex(index)
    except Exception as exc:
        return {"index": index, "error": f"{type(exc).__name__}: {exc}", "error_type": type(exc).__name__}
    return _device(nv, handle, index)


def _device(nv: Any, h: Any, index: int) -> dict[str, Any]:
    dev: dict[str, Any] = {"index": index, "unavailable": {}}
    get = _reader(dev["unavailable"])
    dev["name"] = get("name", lambda: nv.nvmlDeviceGetName(h))
    dev["uuid"] = get("uuid", lambda: nv.nvmlDeviceGetUUID(h))
    dev["pci_bus_id"] = get("pci_bus_id", lambda: _text(nv.nvmlDeviceGetPciInfo(h).busId))
    dev["vbios_version"] = get("vbios_version", lambda: nv.nvmlDeviceGetVbiosVersion(h))
    cc = get("compute_capability", lambda: nv.nvmlDeviceGetCudaComputeCapability(h))
    dev["compute_capability"] = f"{cc[0]}.{cc[1]}" if cc else None
    dev["memory"] = _memory(nv, h, get)
    dev["pcie"] = {
        "current_gen": get("pcie.current_gen", lambda: nv.nvmlDeviceGetCurrPcieLinkGeneration(h)),
        "max_gen": get("pcie.max_gen", lambda: nv.nvmlDeviceGetMaxPcieLinkGeneration(h)),
        "gpu_max_gen": get("pcie.gpu_max_gen", lambda: nv.nvmlDeviceGetGpuMaxPcieLinkGeneration(h)),
        "current_width": get("pcie.current_width", lambda: nv.nvmlDeviceGetCurrPcieLinkWidth(h)),
        "max_width": get("pcie.max_width", lambda: nv.nvmlDeviceGetMaxPcieLinkWidth(h)),
        "replay_counter": get("pcie.replay_counter", lambda: nv.nvmlDeviceGetPcieReplayCounter(h)),
    }
    dev["ecc"] = _ecc(nv, h, get)
    dev["persistence_mode"] = _flag(get("persistence_mode", lambda: nv.nvmlDeviceGetPersistenceMode(h)))
    dev["power"] = _power(nv, h, get)
    dev["clocks_mhz"] = {
        "sm": get("clocks.sm", lambda: nv.nvmlDeviceGetClockInfo(h, nv.NVML_CLOCK_SM)),
        "mem": get("clocks.mem", lambda: nv.nvmlDeviceGetClockInfo(h, nv.NVML_CLOCK_MEM)),
        "sm_max": get("clocks.sm_max", lambda: nv.nvmlDeviceGetMaxClockInfo(h, nv.NVML_CLOCK_SM)),
        "mem_max": get("clocks.mem_max", lambda: nv.nvmlDeviceGetMaxClockInfo(h, nv.NVML_CLOCK_MEM)),
    }
    reasons = get("clock_event_reasons", lambda: _clock_reasons(nv, h))
    dev["clock_event_reasons_mask"] = reasons
    dev["clock_event_reasons"] = [name for bit, name in CLOCK_EVENT_REASONS.items() if reasons and reasons & bit]
    dev["temperature_c"] = get("temperature", lambda: nv.nvmlDeviceGetTemperature(h, nv.NVML_TEMPERATURE_GPU))
    dev["temperature_slowdown_c"] = get(
        "temperature_slowdown", lambda: nv.nvmlDeviceGetTemperatureThreshold(h, nv.NVML_TEMPERATURE_THRESHOLD_SLOWDOWN)
    )
    util = get("utilization", lambda: nv.nvmlDeviceGetUtilizationRates(h))
    dev["utilization_pct"] = {"gpu": util.gpu, "memory": util.memory} if util else None
    dev["processes"] = _processes(nv, h, get)
    mig = get("mig_mode", lambda: nv.nvmlDeviceGetMigMode(h))
    dev["mig"] = {"current": _flag(mig[0]), "pending": _flag(mig[1])} if mig else None
    dev["compute_mode"] = get("compute_mode", lambda: nv.nvmlDeviceGetComputeMode(h))
    return dev


def _clock_reasons(nv: Any, h: Any) -> int:
    fn = getattr(nv, "nvmlDeviceGetCurrentClocksEventReasons", None) or nv.nvmlDeviceGetCurrentClocksThrottleReasons
    return fn(h)


def _memory(nv: Any, h: Any, get: Callable[..., Any]) -> dict[str, Any] | None:
    mem = get("memory_v2", lambda: nv.nvmlDeviceGetMemoryInfo(h, nv.nvmlMemory_v2))
    if mem is None:
        mem = get("memory", lambda: nv.nvmlDeviceGetMemoryInfo(h))
    if mem is None:
        return None
    return {"total": mem.total, "free": mem.free, "used": mem.used, "reserved": getattr(mem, "reserved", None)}


def _ecc(nv: Any, h: Any, get: Callable[..., Any]) -> dict[str, Any]:
    mode = get("ecc.mode", lambda: nv.nvmlDeviceGetEccMode(h))
    ecc: dict[str, Any] = {"current": _flag(mode[0]) if mode else None, "pending": _flag(mode[1]) if mode else None}
    if ecc["current"]:
        for counter in ("volatile", "aggregate"):
            for kind in ("corrected", "uncorrected"):
                ecc[f"{counter}_{kind}"] = get(
                    f"ecc.{counter}_{kind}",
                    lambda c=counter, k=kind: nv.nvmlDeviceGetTotalEccErrors(
                        h, getattr(nv, f"NVML_MEMORY_ERROR_TYPE_{k.upper()}"), getattr(nv, f"NVML_{c.upper()}_ECC")
                    ),
                )
    rows = get("ecc.remapped_rows", lambda: nv.nvmlDeviceGetRemappedRows(h))
    if rows:
        ecc["remapped_rows"] = {
            "correctable": rows[0],
            "uncorrectable": rows[1],
            "pending": bool(rows[2]),
            "failure": bool(rows[3]),
        }
    pending = get("ecc.retired_pages_pending", lambda: nv.nvmlDeviceGetRetiredPagesPendingStatus(h))
    ecc["retired_pages_pending"] = _flag(pending)
    return ecc


def _power(nv: Any, h: Any, get: Callable[..., Any]) -> dict[str, Any]:
    def watts(value: Any) -> float | None:
        return round(value / 1000.0, 1) if isinstance(value, (int, float)) else None

    limits = get("power.constraints", lambda: nv.nvmlDeviceGetPowerManagementLimitConstraints(h))
    return {
        "usage_w": watts(get("power.usage", lambda: nv.nvmlDeviceGetPowerUsage(h))),
        "limit_w": watts(get("power.limit", lambda: nv.nvmlDeviceGetPowerManagementLimit(h))),
        "enforced_limit_w": watts(get("power.enforced_limit", lambda: nv.nvmlDeviceGetEnforcedPowerLimit(h))),
        "default_limit_w": watts(get("power.default_limit", lambda: nv.nvmlDeviceGetPowerManagementDefaultLimit(h))),
        "min_limit_w": watts(limits[0]) if limits else None,
        "max_limit_w": watts(limits[1]) if limits else None,
    }


def _processes(nv: Any, h: Any, get: Callable[..., Any]) -> list[dict[str, Any]]:
    procs = []
    calls = {
        "compute": lambda: nv.nvmlDeviceGetComputeRunningProcesses(h),
        "graphics": lambda: nv.nvmlDeviceGetGraphicsRunningProcesses(h),
    }
    for kind, call in calls.items():
        for p in get(f"processes.{kind}", call) or []:
            procs.append(
                {
                    "pid": p.pid,
                    "kind": kind,
                    "used_bytes": getattr(p, "usedGpuMemory", None),
                    "name": _process_name(p.pid),
                }
            )
    return procs


def _process_name(pid: int) -> str | None:
    try:
        with open(f"/proc/{pid}/comm", encoding="utf-8") as fh:
            return fh.read().strip()
    except OSError:
        return None  # another container's process, or gone


def _reader(unavailable: dict[str, str]) -> Callable[[str, Callable[[], Any]], Any]:
    """A call wrapper that stores the reason under `unavailable[field]` and returns None."""

    def get(field: str, call: Callable[[], Any]) -> Any:
        try:
            return _text(call())
        except Exception as exc:
            unavailable[field] = type(exc).__name__.replace("NVMLError_", "") or str(exc)
            return None

    return get


def _text(value: Any) -> Any:
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else value


def _flag(value: Any) -> bool | None:
    return None if value is None else bool(value)
