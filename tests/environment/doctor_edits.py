"""Failure cases made by editing a recorded GPU snapshot, one function per broken machine.

The base is the real H200 capture (tests/environment/fixtures/h200_snapshot.json, made by
scripts/device/doctor_capture.py); MOPT_DOCTOR_GPU_SNAPSHOT may name another recorded GPU
snapshot. Each edit sets every probe value its failure involves, so it does not depend on
what the base machine happened to report (e.g. whether /proc/modules was readable)."""

from __future__ import annotations

import copy
import json
import os
from typing import Any

import pytest

FIXTURES = os.path.join(os.path.dirname(__file__), "fixtures")
CPU_SNAPSHOT = os.path.join(FIXTURES, "cpu_snapshot.json")
GPU_SNAPSHOT = os.environ.get("MOPT_DOCTOR_GPU_SNAPSHOT") or os.path.join(FIXTURES, "h200_snapshot.json")
MODULES = ("nvidia", "nvidia_uvm", "nvidia_drm", "nvidia_modeset", "nvidia_peermem", "nouveau")


def load(path: str) -> dict[str, Any]:
    with open(path, encoding="utf-8") as fh:
        return json.load(fh)


def gpu_base() -> dict[str, Any]:
    """A deep copy of the recorded GPU snapshot, or skip the test when it is not committed yet."""
    if not os.path.exists(GPU_SNAPSHOT):
        pytest.skip(
            f"no recorded GPU snapshot at {GPU_SNAPSHOT}: run scripts/device/doctor_capture.py on the GPU machine"
        )
    snap = copy.deepcopy(load(GPU_SNAPSHOT))
    snap.pop("bench", None)
    return snap


def data(snap: dict[str, Any], probe: str) -> dict[str, Any]:
    return snap["probes"][probe]["data"]


def device(snap: dict[str, Any], index: int = 0) -> dict[str, Any]:
    return data(snap, "nvml")["devices"][index]


def set_modules(snap: dict[str, Any], **loaded: bool) -> None:
    """Make /proc/modules readable and list exactly the given modules."""
    state = {name: bool(loaded.get(name, False)) for name in MODULES}
    text = "".join(f"{name} 1 0 - Live 0x0000000000000000\n" for name, on in state.items() if on)
    snap["probes"]["modules"] = {
        "ok": True,
        "elapsed_s": 0.0,
        "data": {
            "proc_modules_readable": True,
            "proc_modules": "ext4 1 0 - Live 0x0\n" + text,
            "loaded": state,
            "sys_module": dict(state),
            "tainted": 0,
        },
    }


def ensure_pci_gpu(snap: dict[str, Any], driver: str | None) -> None:
    """The GPU stays visible on the PCI bus whatever happens to the driver."""
    pci = data(snap, "pci")
    gpus = [d for d in pci.get("sysfs_devices", []) if str(d.get("class", "")).startswith("0x03")]
    if not gpus:
        gpus = [
            {
                "address": "0000:00:06.0",
                "device_id": "0x2335",
                "class": "0x030200",
                "current_link_speed": None,
                "current_link_width": None,
                "max_link_speed": None,
                "max_link_width": None,
            }
        ]
        pci["sysfs_devices"] = gpus
    for d in gpus:
        d["driver"] = driver


def torch_without_gpu(snap: dict[str, Any], init_error: str, warnings: list[str] | None = None) -> None:
    t = data(snap, "torch")
    t.update({"cuda_available": False, "device_count": 0, "init_error": init_error, "warnings": warnings or []})
    t.pop("devices", None)
    t.pop("bf16_supported", None)


def nvml_fails(snap: dict[str, Any], error_type: str, message: str) -> None:
    snap["probes"]["nvml"] = {
        "ok": False,
        "error_type": error_type,
        "error": f"{error_type}: {message}",
        "elapsed_s": 0.01,
    }


def module_missing(snap: dict[str, Any]) -> dict[str, Any]:
    """Driver installed but the nvidia module is not loaded (e.g. kernel upgraded, DKMS did not rebuild)."""
    nvml_fails(snap, "NVMLError_DriverNotLoaded", "Driver Not Loaded")
    set_modules(snap)
    ensure_pci_gpu(snap, driver=None)
    data(snap, "dev_nodes")["nodes"] = {}
    data(snap, "driver_proc").update({"version": None, "gpus": {}, "sys_module_version": None})
    data(snap, "libcuda").update({"loaded": "libcuda.so.1", "cuDriverGetVersion_rc": 0})
    data(snap, "secure_boot").update(
        {
            "secure_boot": False,
            "nvidia_module_file": "/lib/modules/6.8.0-49-generic/updates/dkms/nvidia.ko.zst",
            "nvidia_module_signer": None,
        }
    )
    smi = "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver. Make sure that the latest NVIDIA driver is installed and running."
    snap["probes"]["nvidia_smi"] = {
        "ok": True,
        "elapsed_s": 0.1,
        "data": {"found": True, "rc": 9, "xml": smi, "stderr": "", "message": smi},
    }
    torch_without_gpu(
        snap,
        "RuntimeError: Found no NVIDIA driver on your system. Please check that you have an NVIDIA GPU and installed a driver from http://www.nvidia.com/Download/index.aspx",
    )
    return snap


def secure_boot_unsigned(snap: dict[str, Any]) -> dict[str, Any]:
    module_missing(snap)
    data(snap, "secure_boot").update({"efi": True, "secure_boot": True, "nvidia_module_signer": None})
    return snap


def nouveau_loaded(snap: dict[str, Any]) -> dict[str, Any]:
    module_missing(snap)
    set_modules(snap, nouveau=True)
    ensure_pci_gpu(snap, driver="nouveau")
    return snap


def uvm_missing(snap: dict[str, Any]) -> dict[str, Any]:
    """nvidia loaded, nvidia_uvm not: NVML works, CUDA does not."""
    set_modules(snap, nvidia=True, nvidia_modeset=True)
    data(snap, "dev_nodes")["nodes"].pop("/dev/nvidia-uvm", None)
    data(snap, "dev_nodes")["nodes"].pop("/dev/nvidia-uvm-tools", None)
    torch_without_gpu(
        snap,
        "",
        [
            "CUDA initialization: CUDA unknown error - this may be due to an incorrectly set up environment, e.g. changing env variable CUDA_VISIBLE_DEVICES after program start. Setting the available devices to be zero."
        ],
    )
    return snap


def driver_too_old(snap: dict[str, Any]) -> dict[str, Any]:
    """torch built for CUDA 13.0 on a 525 driver (CUDA 12.0)."""
    nvml = data(snap, "nvml")
    nvml.update({"driver_version": "525.147.05", "cuda_driver_version": 12000})
    data(snap, "libcuda")["cuda_driver_version"] = 12000
    data(snap, "torch").update({"version": "2.11.0+cu130", "cuda": "13.0"})
    torch_without_gpu(
        snap,
        "",
        [
            "CUDA initialization: The NVIDIA driver on your system is too old (found version 12000). Please update your GPU driver by downloading and installing a new version from the URL: http://www.nvidia.com/Download/index.aspx Alternatively, go to: https://pytorch.org to install a PyTorch version that has been compiled with your version of the CUDA driver."
        ],
    )
    return snap


def torch_cpu_build(snap: dict[str, Any]) -> dict[str, Any]:
    """A CPU-only torch wheel on a machine whose GPU and driver work."""
    data(snap, "torch").update({"version": "2.11.0+cpu", "cuda": None, "cudnn": None, "nccl": None, "arch_list": []})
    torch_without_gpu(snap, "AssertionError: Torch not compiled with CUDA enabled")
    return snap


def torch_wrong_arch(snap: dict[str, Any]) -> dict[str, Any]:
    """torch built for CUDA but without kernels for this GPU's architecture."""
    cc = device(snap)["compute_capability"]
    major = int(cc.split(".")[0])
    archs = [(5, 0), (6, 0), (7, 0), (7, 5), (8, 0), (8, 6), (9, 0), (10, 0), (12, 0)]
    data(snap, "torch")["arch_list"] = [f"sm_{m}{n}" for m, n in archs if m != major]
    return snap


def pcie_x4(snap: dict[str, Any]) -> dict[str, Any]:
    device(snap)["pcie"].update({"current_width": 4, "max_width": 16})
    return snap


def laptop_x4(snap: dict[str, Any]) -> dict[str, Any]:
    """RTX 4060 Laptop (a PCIe 4.0 x8 part) whose link trained down to x4, with a slow host-to-device benchmark."""
    dev = device(snap)
    dev.update({"name": "NVIDIA GeForce RTX 4060 Laptop GPU", "compute_capability": "8.9"})
    dev["pcie"].update({"current_gen": 4, "max_gen": 4, "gpu_max_gen": 4, "current_width": 4, "max_width": 8})
    snap["bench"] = {
        "ok": True,
        "device_index": 0,
        "device": {"name": dev["name"]},
        "datasheet": "GeForce RTX 4060 Laptop GPU",
        "results": [
            {
                "name": "h2d_pinned",
                "label": "host-to-device (pinned)",
                "value": 6.1,
                "unit": "GB/s",
                "reference": 15.75,
                "reference_kind": "PCIe gen4 x8 one-way",
                "pct_of_reference": 38.7,
                "flagged": True,
            },
            {
                "name": "matmul_bf16",
                "label": "bf16 matmul",
                "value": 24.0,
                "unit": "TFLOP/s",
                "reference": 29.1,
                "reference_kind": "datasheet dense",
                "pct_of_reference": 82.5,
                "flagged": False,
            },
        ],
    }
    return snap


def ecc_errors(snap: dict[str, Any]) -> dict[str, Any]:
    device(snap)["ecc"].update(
        {
            "current": True,
            "pending": True,
            "volatile_uncorrected": 3,
            "aggregate_uncorrected": 3,
            "remapped_rows": {"correctable": 0, "uncorrectable": 1, "pending": True, "failure": False},
        }
    )
    return snap


def ecc_remap_pending(snap: dict[str, Any]) -> dict[str, Any]:
    device(snap)["ecc"].update(
        {
            "current": True,
            "pending": True,
            "volatile_uncorrected": 0,
            "aggregate_uncorrected": 0,
            "remapped_rows": {"correctable": 1, "uncorrectable": 0, "pending": True, "failure": False},
        }
    )
    return snap


def power_capped(snap: dict[str, Any]) -> dict[str, Any]:
    power = device(snap)["power"]
    default = power.get("default_limit_w") or 700.0
    power.update(
        {"default_limit_w": default, "limit_w": round(default * 0.5, 1), "enforced_limit_w": round(default * 0.5, 1)}
    )
    device(snap)["clock_event_reasons"] = ["sw_power_cap", "hw_slowdown"]
    return snap


def memory_in_use(snap: dict[str, Any]) -> dict[str, Any]:
    """Another process holds 60% of the GPU's memory."""
    mem = device(snap)["memory"]
    total = mem["total"]
    mem.update({"used": int(total * 0.6), "free": int(total * 0.4) - (mem.get("reserved") or 0)})
    device(snap)["processes"] = [{"pid": 4242, "kind": "compute", "used_bytes": int(total * 0.6), "name": "python3"}]
    return snap


def old_gpu(snap: dict[str, Any], cc: str, name: str) -> dict[str, Any]:
    dev = device(snap)
    dev.update({"compute_capability": cc, "name": name})
    for t in data(snap, "torch").get("devices", []):
        t.update({"compute_capability": cc, "name": name})
    data(snap, "torch")["bf16_supported"] = tuple(map(int, cc.split("."))) >= (8, 0)
    return snap


def driver_not_installed_with_secure_boot(snap: dict[str, Any]) -> dict[str, Any]:
    """Secure Boot on, and no NVIDIA driver on the host at all: modinfo finds no nvidia module, NVML's library
    is missing, nvidia-smi too."""
    module_missing(snap)
    nvml_fails(snap, "NVMLError_LibraryNotFound", "NVML Shared Library Not Found")
    data(snap, "secure_boot").update(
        {
            "efi": True,
            "secure_boot": True,
            "modinfo_found": True,
            "nvidia_module_file": None,
            "nvidia_module_signer": None,
        }
    )
    data(snap, "libcuda").update({"loaded": None, "cuda_driver_version": None})
    data(snap, "container_toolkit")["in_container"] = False
    snap["probes"]["nvidia_smi"]["data"] = {"found": False}
    return snap


def compute_only_container(snap: dict[str, Any]) -> dict[str, Any]:
    """A container started with NVIDIA_DRIVER_CAPABILITIES=compute: libcuda is mounted and torch runs on the
    GPU, but libnvidia-ml and nvidia-smi (the `utility` capability) are not."""
    nvml_fails(snap, "NVMLError_LibraryNotFound", "NVML Shared Library Not Found")
    snap["probes"]["nvidia_smi"]["data"] = {"found": False}
    tk = data(snap, "container_toolkit")
    tk["in_container"] = True
    tk.setdefault("env", {})["NVIDIA_DRIVER_CAPABILITIES"] = "compute"
    return snap


def driver_and_torch(
    snap: dict[str, Any], driver: str, cuda_int: int, torch: str, torch_cuda: str | None
) -> dict[str, Any]:
    """A driver (version, CUDA it supports as NVML encodes it) and a torch build (version, its CUDA)."""
    data(snap, "nvml").update({"driver_version": driver, "cuda_driver_version": cuda_int})
    data(snap, "libcuda")["cuda_driver_version"] = cuda_int
    data(snap, "torch").update({"version": torch, "cuda": torch_cuda})
    return snap


def old_gpu_without_kernels(snap: dict[str, Any], cc: str, name: str, arch_list: list[str]) -> dict[str, Any]:
    """A GPU whose architecture the installed torch was not built for: torch refuses it at init, with the
    warning torch prints (the range is the arch list's)."""
    old_gpu(snap, cc, name)
    data(snap, "torch")["arch_list"] = arch_list
    ccs = sorted((int(a[3:-1]), int(a[-1])) for a in arch_list)
    low, high = (f"{major}.{minor}" for major, minor in (ccs[0], ccs[-1]))
    warning = (
        f"Found GPU0 {name} which is of cuda capability {cc}. Minimum and Maximum cuda capability supported "
        f"by this version of PyTorch is ({low}) - ({high})"
    )
    torch_without_gpu(snap, "", [warning])
    return snap


def cuda_visible_devices(snap: dict[str, Any], value: str) -> dict[str, Any]:
    """CUDA_VISIBLE_DEVICES set to `value` in the doctor's environment. With a value that names no GPU ('',
    '7', '-1', 'GPU-bogus', '7,0'), torch on an H100 recorded exactly this: no device, no warning, and
    torch.cuda.init() raising 'No CUDA GPUs are available'; NVML ignores the variable and lists the GPU."""
    data(snap, "system").setdefault("env", {})["CUDA_VISIBLE_DEVICES"] = value
    data(snap, "container_toolkit").setdefault("env", {})["CUDA_VISIBLE_DEVICES"] = value
    torch_without_gpu(snap, "RuntimeError: No CUDA GPUs are available")
    return snap


def nvidia_smi_hung(snap: dict[str, Any]) -> dict[str, Any]:
    """nvidia-smi never answers: the probe's record when a stand-in that sleeps was first on PATH on an H100
    (killed at its 30 s timeout, inside a probe that itself succeeded)."""
    snap["probes"]["nvidia_smi"] = {
        "ok": True,
        "elapsed_s": 30.034,
        "data": {"found": True, "rc": None, "xml": "", "stderr": "", "timed_out": True, "message": ""},
    }
    return snap


def torch_missing(snap: dict[str, Any]) -> dict[str, Any]:
    """No torch in the interpreter the doctor runs under."""
    snap["probes"]["torch"]["data"] = {"installed": False, "error": "ModuleNotFoundError: No module named 'torch'"}
    snap["probes"]["python_packages"]["data"]["versions"]["torch"] = None
    return snap
