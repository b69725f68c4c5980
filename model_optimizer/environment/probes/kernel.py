"""Kernel-side probes, all readable without root: the driver's /proc files, loaded modules,
/dev/nvidia* nodes, NVIDIA PCI functions (sysfs and lspci), Secure Boot and module signing."""

from __future__ import annotations

import glob
import os
from typing import Any

from model_optimizer.environment._util import read_text, run_cmd, which

MODULES_OF_INTEREST = ("nvidia", "nvidia_uvm", "nvidia_drm", "nvidia_modeset", "nvidia_peermem", "nouveau")
NVIDIA_PCI_VENDOR = "0x10de"
SECURE_BOOT_EFIVAR = "/sys/firmware/efi/efivars/SecureBoot-8be4df61-93ca-11d2-aa0d-00e098032b8c"


def probe_driver_proc() -> dict[str, Any]:
    """/proc/driver/nvidia/version and per-GPU information files, raw."""
    gpus = {}
    for path in sorted(glob.glob("/proc/driver/nvidia/gpus/*/information")):
        gpus[path.split("/")[-2]] = read_text(path)
    return {
        "version": read_text("/proc/driver/nvidia/version"),
        "gpus": gpus,
        "sys_module_version": (read_text("/sys/module/nvidia/version") or "").strip() or None,
    }


def probe_modules() -> dict[str, Any]:
    """Loaded kernel modules: /proc/modules raw and parsed, plus /sys/module as a second source
    (it also lists modules built into the kernel)."""
    raw = read_text("/proc/modules")
    loaded = sorted({line.split()[0] for line in (raw or "").splitlines() if line.strip()})
    return {
        "proc_modules_readable": raw is not None,
        "proc_modules": raw,
        "loaded": {name: name in loaded for name in MODULES_OF_INTEREST} if raw is not None else None,
        "sys_module": {name: os.path.isdir(f"/sys/module/{name}") for name in MODULES_OF_INTEREST},
        "tainted": _int((read_text("/proc/sys/kernel/tainted") or "").strip()),
    }


def probe_dev_nodes() -> dict[str, Any]:
    """/dev/nvidia* (and WSL's /dev/dxg) with whether this user may open them."""
    nodes = {}
    for path in sorted(glob.glob("/dev/nvidia*") + glob.glob("/dev/dxg")):
        if os.path.isdir(path):
            continue
        nodes[path] = {"read": os.access(path, os.R_OK), "write": os.access(path, os.W_OK)}
    return {"nodes": nodes, "uid": os.getuid(), "groups": sorted(os.getgroups())}


def probe_pci() -> dict[str, Any]:
    """NVIDIA PCI functions from sysfs (link speed and width, bound driver) and lspci's view."""
    devices = []
    for path in sorted(glob.glob("/sys/bus/pci/devices/*")):
        if (read_text(f"{path}/vendor") or "").strip() != NVIDIA_PCI_VENDOR:
            continue
        driver = os.path.realpath(f"{path}/driver") if os.path.exists(f"{path}/driver") else None
        devices.append(
            {
                "address": os.path.basename(path),
                "device_id": (read_text(f"{path}/device") or "").strip(),
                "class": (read_text(f"{path}/class") or "").strip(),
                "driver": os.path.basename(driver) if driver else None,
                "current_link_speed": (read_text(f"{path}/current_link_speed") or "").strip() or None,
                "current_link_width": _int((read_text(f"{path}/current_link_width") or "").strip()),
                "max_link_speed": (read_text(f"{path}/max_link_speed") or "").strip() or None,
                "max_link_width": _int((read_text(f"{path}/max_link_width") or "").strip()),
            }
        )
    lspci = run_cmd(["lspci", "-nn", "-d", "10de:"], timeout_s=10) if which("lspci") else {"found": False}
    return {"sysfs_devices": devices, "lspci": lspci}


def probe_secure_boot() -> dict[str, Any]:
    """Secure Boot state (EFI variable, else mokutil) and whether the nvidia module is signed."""
    state = None
    try:
        with open(SECURE_BOOT_EFIVAR, "rb") as fh:
            data = fh.read()
        state = bool(data[-1]) if data else None  # 4 attribute bytes, then the value byte
    except OSError:
        pass
    mokutil = run_cmd([which("mokutil") or "mokutil", "--sb-state"], timeout_s=10)
    text = (mokutil.get("stdout") or "") + (mokutil.get("stderr") or "")
    if state is None and "SecureBoot enabled" in text:
        state = True
    elif state is None and "SecureBoot disabled" in text:
        state = False
    modinfo = which("modinfo")
    signer = run_cmd([modinfo, "-F", "signer", "nvidia"], timeout_s=10) if modinfo else {"found": False}
    filename = run_cmd([modinfo, "-F", "filename", "nvidia"], timeout_s=10) if modinfo else {"found": False}
    return {
        "efi": os.path.isdir("/sys/firmware/efi"),
        "secure_boot": state,
        "mokutil": mokutil,
        "lockdown": (read_text("/sys/kernel/security/lockdown") or "").strip() or None,
        "nvidia_module_file": (filename.get("stdout") or "").strip() or None if filename.get("rc") == 0 else None,
        "nvidia_module_signer": (signer.get("stdout") or "").strip() or None if signer.get("rc") == 0 else None,
        "modinfo_found": bool(modinfo),
    }


def _int(text: str) -> int | None:
    try:
        return int(text, 0)
    except (TypeError, ValueError):
        return None
