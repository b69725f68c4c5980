"""GPU utilisation, memory, power and temperature through NVML, for a server on this machine."""

from __future__ import annotations


def read_gpus() -> list[dict]:
    """One dict per GPU, or [] without an NVIDIA driver (no GPU here is not an error)."""
    try:
        import pynvml

        pynvml.nvmlInit()
    except Exception:  # noqa: BLE001 - no library or no driver
        return []
    try:
        gpus = []
        for i in range(pynvml.nvmlDeviceGetCount()):
            handle = pynvml.nvmlDeviceGetHandleByIndex(i)
            memory = pynvml.nvmlDeviceGetMemoryInfo(handle)
            gpus.append(
                {
                    "index": i,
                    "utilization": pynvml.nvmlDeviceGetUtilizationRates(handle).gpu,
                    "memory_used": memory.used,
                    "memory_total": memory.total,
                    "power_w": pynvml.nvmlDeviceGetPowerUsage(handle) / 1000.0,
                    "temperature_c": pynvml.nvmlDeviceGetTemperature(handle, pynvml.NVML_TEMPERATURE_GPU),
                }
            )
        return gpus
    except Exception:  # noqa: BLE001 - a GPU that cannot be read shows as none
        return []
    finally:
        pynvml.nvmlShutdown()
