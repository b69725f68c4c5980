"""Read access to a snapshot (the JSON of all probe results) and saving/loading it.

Rules read through `Snapshot` so that each question ("is the nvidia module loaded?",
"which CUDA does the driver support?") is answered once, from the best source available."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from model_optimizer.common.fileio import atomic_write, read_json
from model_optimizer.environment.knowledge import cuda_from_int


class Snapshot:
    """A recorded snapshot, with the answers rules need."""

    def __init__(self, raw: dict[str, Any]) -> None:
        if not isinstance(raw, dict) or not isinstance(raw.get("probes"), dict):
            raise ValueError("not a doctor snapshot: expected a JSON object with a 'probes' object")
        for name, result in raw["probes"].items():  # rules read each probe's data as an object
            if result is not None and (not isinstance(result, dict) or not isinstance(result.get("data") or {}, dict)):
                raise ValueError(f"not a doctor snapshot: probe {name!r} must be an object whose 'data' is an object")
        self.raw = raw

    # -- probes -------------------------------------------------------------------------
    def data(self, name: str) -> dict[str, Any]:
        """A probe's data, or {} when it failed or was not run."""
        result = self.raw["probes"].get(name) or {}
        return (result.get("data") or {}) if result.get("ok") else {}

    def error(self, name: str) -> tuple[str | None, str | None]:
        """(error_type, message) of a failed probe, or (None, None)."""
        result = self.raw["probes"].get(name) or {}
        if result.get("ok", True):
            return None, None
        return result.get("error_type"), result.get("error")

    @property
    def bench(self) -> dict[str, Any] | None:
        return self.raw.get("bench")

    # -- host ---------------------------------------------------------------------------
    @property
    def os_family(self) -> str:
        return self.data("system").get("os_family") or "other"

    @property
    def is_wsl(self) -> bool:
        return bool(self.data("system").get("wsl"))

    # -- driver -------------------------------------------------------------------------
    @property
    def nvml_ok(self) -> bool:
        return bool((self.raw["probes"].get("nvml") or {}).get("ok"))

    @property
    def devices(self) -> list[dict[str, Any]]:
        """NVML's per-GPU records."""
        return list(self.data("nvml").get("devices") or [])

    @property
    def driver_version(self) -> str | None:
        nvml = self.data("nvml").get("driver_version")
        if nvml:
            return nvml
        smi = (self.data("nvidia_smi").get("parsed") or {}).get("driver_version")
        if smi:
            return smi
        match = re.search(
            r"Kernel Module\s+(?:for \S+\s+)?(\d+\.\d+(?:\.\d+)?)", self.data("driver_proc").get("version") or ""
        )
        return match.group(1) if match else self.data("driver_proc").get("sys_module_version")

    @property
    def driver_cuda(self) -> str | None:
        """Newest CUDA version the installed driver supports, e.g. '13.0'."""
        value = self.data("nvml").get("cuda_driver_version") or self.data("libcuda").get("cuda_driver_version")
        if value:
            return cuda_from_int(value)
        return (self.data("nvidia_smi").get("parsed") or {}).get("cuda_version")

    def module_loaded(self, name: str) -> bool | None:
        """True/False from /proc/modules, else from /sys/module; None when neither says."""
        mods = self.data("modules")
        loaded = mods.get("loaded")
        if loaded is not None:
            return bool(loaded.get(name))
        sys_module = mods.get("sys_module") or {}
        return True if sys_module.get(name) else None

    def dev_node(self, path: str) -> dict[str, Any] | None:
        return (self.data("dev_nodes").get("nodes") or {}).get(path)

    @property
    def pci_gpus(self) -> list[dict[str, Any]]:
        """NVIDIA display/3D controllers on the PCI bus (class 0x03xxxx)."""
        devices = self.data("pci").get("sysfs_devices") or []
        return [d for d in devices if str(d.get("class", "")).startswith("0x03")]

    @property
    def gpu_hardware_seen(self) -> bool:
        """Any sign of an NVIDIA GPU, working or not."""
        lspci = (self.data("pci").get("lspci") or {}).get("stdout") or ""
        return bool(
            self.pci_gpus
            or self.devices
            or "NVIDIA" in lspci
            or self.dev_node("/dev/nvidia0")
            or self.data("driver_proc").get("version")
            or self.data("torch").get("cuda_available")
            or (self.is_wsl and self.dev_node("/dev/dxg"))
        )

    # -- torch --------------------------------------------------------------------------
    @property
    def torch(self) -> dict[str, Any]:
        return self.data("torch")

    @property
    def gpu_usable(self) -> bool:
        """torch can run CUDA work here."""
        return bool(self.torch.get("cuda_available")) and bool(self.torch.get("device_count"))


def load_snapshot(path: str) -> dict[str, Any]:
    """Read a snapshot JSON file, with clear errors naming it for a wrong path or a wrong file."""
    file = Path(path)
    if file.is_dir():
        raise ValueError(f"--snapshot {path} is a folder; give the JSON file --save-snapshot wrote")
    if not file.is_file():
        raise FileNotFoundError(f"snapshot file {path} does not exist")
    raw = read_json(file)  # its errors name the file
    try:
        Snapshot(raw)  # validates the shape
    except ValueError as exc:
        raise ValueError(f"{path}: {exc}") from None
    return raw


def write_json_atomic(path: str, obj: Any) -> None:
    """Write JSON to a temp file beside `path`, then rename it into place."""
    atomic_write(path, json.dumps(obj, indent=1) + "\n")
