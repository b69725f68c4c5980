"""GPU telemetry through NVML while a run lasts, when the server runs on this machine.

A daemon thread samples utilization, memory, power and SM clock of every GPU; anything
missing (no pynvml, no driver, a remote server) gives `available: false` and a reason.
"""

from __future__ import annotations

import socket
import threading
from urllib.parse import urlparse

LOCAL_HOSTS = {"localhost", "127.0.0.1", "::1", "0.0.0.0"}


def is_local(base_url: str) -> bool:
    """Whether the server's host name points at this machine."""
    host = urlparse(base_url).hostname or ""
    return host in LOCAL_HOSTS or host.startswith("127.") or host in (socket.gethostname(), socket.getfqdn())


class GpuSampler:
    """Sample NVML every `interval` seconds between `start()` and `stop()`."""

    def __init__(self, interval: float = 0.5) -> None:
        self.interval = interval
        self.samples: list[list[dict]] = []
        self.reason = ""
        self._nvml = None
        self._handles: list = []
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> bool:
        try:
            import pynvml

            pynvml.nvmlInit()
            self._handles = [pynvml.nvmlDeviceGetHandleByIndex(i) for i in range(pynvml.nvmlDeviceGetCount())]
            self._nvml = pynvml
        except Exception as exc:  # pynvml raises NVMLError subclasses or ImportError
            self.reason = f"NVML unavailable: {exc}"
            return False
        self._thread = threading.Thread(target=self._run, name="mopt-bench-nvml", daemon=True)
        self._thread.start()
        return True

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            self.samples.append([self._read(h) for h in self._handles])

    def _read(self, handle) -> dict:
        nv = self._nvml
        sample: dict = {}
        for key, read in (
            ("util_pct", lambda: nv.nvmlDeviceGetUtilizationRates(handle).gpu),
            ("mem_used_gib", lambda: nv.nvmlDeviceGetMemoryInfo(handle).used / 2**30),
            ("power_w", lambda: nv.nvmlDeviceGetPowerUsage(handle) / 1000.0),
            ("sm_clock_mhz", lambda: nv.nvmlDeviceGetClockInfo(handle, nv.NVML_CLOCK_SM)),
        ):
            try:
                sample[key] = float(read())
            except Exception:  # a field a GPU does not support is left out
                pass
        return sample

    def stop(self) -> dict:
        """Stop sampling and return per-GPU mean and max of each field."""
        if self._thread is None:
            return {"available": False, "reason": self.reason or "not started"}
        self._stop.set()
        self._thread.join()
        try:
            self._nvml.nvmlShutdown()
        except Exception:
            pass
        return summarize_gpu_samples(self.samples, len(self._handles))


def summarize_gpu_samples(samples: list[list[dict]], num_gpus: int) -> dict:
    """Per-GPU mean and max of each sampled field (`samples`: one list of per-GPU dicts per tick)."""
    gpus = []
    for index in range(num_gpus):
        per_gpu: dict = {"index": index}
        for key in ("util_pct", "mem_used_gib", "power_w", "sm_clock_mhz"):
            seen = [s[index][key] for s in samples if key in s[index]]
            if seen:
                per_gpu[key] = {"mean": sum(seen) / len(seen), "max": max(seen)}
        gpus.append(per_gpu)
    return {"available": True, "num_samples": len(samples), "gpus": gpus}
