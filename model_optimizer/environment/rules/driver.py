"""Rules about the kernel driver: installed, loaded, not blocked by Secure Boot or nouveau,
nvidia_uvm present, device nodes usable, persistence mode."""

from __future__ import annotations

from typing import Any

from model_optimizer.environment.findings import Finding
from model_optimizer.environment.knowledge import gpu_spec
from model_optimizer.environment.snapshot import Snapshot

WHY_NO_DRIVER = "Without a loaded NVIDIA driver no CUDA program can start: torch falls back to the CPU, 10-100x slower for LLM inference."
REBOOT_CHECK = "nvidia-smi   # after the fix: must list the GPU"
WSL_DRIVER = [
    "Install or update the NVIDIA driver on Windows (never a Linux driver inside WSL), then run `wsl --shutdown` in PowerShell.",
    "ls /usr/lib/wsl/lib/libcuda.so.1 /usr/lib/wsl/lib/nvidia-smi   # provided by the Windows driver",
]
INSTALL_DRIVER = {
    "debian": [
        "sudo apt update && sudo apt install -y linux-headers-$(uname -r)",
        "sudo ubuntu-drivers install   # Debian: sudo apt install nvidia-driver",
        "sudo reboot",
    ],
    "rhel": [
        "sudo dnf install -y kernel-devel-$(uname -r) kernel-headers-$(uname -r)",
        "sudo dnf config-manager --add-repo https://developer.download.nvidia.com/compute/cuda/repos/rhel9/x86_64/cuda-rhel9.repo",
        "sudo dnf module install -y nvidia-driver:latest-dkms",
        "sudo reboot",
    ],
    "wsl": WSL_DRIVER,
}


def rule_driver_loaded(snap: Snapshot) -> list[Finding]:
    """Is a working driver there? If not, say which of the usual reasons it is."""
    if not snap.gpu_hardware_seen:
        return []
    if snap.nvml_ok:
        return [
            Finding(
                "driver.ok",
                "ok",
                f"NVIDIA driver {snap.driver_version} is loaded; it supports CUDA up to {snap.driver_cuda}",
                details={"driver_version": snap.driver_version, "driver_cuda": snap.driver_cuda},
            )
        ]
    error_type, message = snap.error("nvml")
    details = {
        "nvml_error": message,
        "nvidia_module_loaded": snap.module_loaded("nvidia"),
        "proc_driver_version": snap.data("driver_proc").get("version"),
    }
    if snap.gpu_usable:
        return [_nvml_missing_beside_a_working_gpu(snap, message, details)]
    if snap.is_wsl:
        return [
            Finding(
                "driver.wsl_no_driver",
                "error",
                "WSL sees no NVIDIA driver from Windows",
                WHY_NO_DRIVER,
                {"wsl": WSL_DRIVER},
                details,
            )
        ]
    if _secure_boot_blocks(snap):
        return []  # rule_secure_boot explains it
    if error_type == "NVMLError_LibRmVersionMismatch":
        return [
            Finding(
                "driver.version_mismatch",
                "error",
                "Driver libraries and the loaded kernel module are different versions (driver upgraded, no reboot)",
                "Every CUDA and NVML call fails until the module matching the libraries is loaded.",
                {
                    "any": [
                        "cat /proc/driver/nvidia/version   # the loaded module",
                        "sudo reboot   # or, with no GPU process running: sudo rmmod nvidia_uvm nvidia_drm nvidia_modeset nvidia && sudo modprobe nvidia",
                    ]
                },
                details,
            )
        ]
    if error_type == "NVMLError_NoPermission":
        return [
            Finding(
                "driver.no_permission",
                "error",
                "This user may not open the NVIDIA device files",
                WHY_NO_DRIVER,
                {"any": ["ls -l /dev/nvidia*", "sudo usermod -aG video,render $USER   # then log out and in"]},
                details,
            )
        ]
    not_loaded = error_type == "NVMLError_DriverNotLoaded" or snap.module_loaded("nvidia") is False
    installed = bool(snap.data("secure_boot").get("nvidia_module_file") or snap.data("driver_proc").get("version"))
    if error_type == "NVMLError_LibraryNotFound" and not installed and snap.module_loaded("nvidia") is not True:
        if snap.data("container_toolkit").get("in_container"):
            return [
                Finding(
                    "driver.container_without_gpu",
                    "error",
                    "Running in a container that was started without the GPU (no NVIDIA libraries mounted)",
                    WHY_NO_DRIVER,
                    {
                        "any": [
                            "docker run --gpus all ...   # or --device nvidia.com/gpu=all with CDI",
                            "On the host: nvidia-ctk runtime configure --runtime=docker && systemctl restart docker",
                        ]
                    },
                    details,
                )
            ]
        return [
            Finding(
                "driver.not_installed",
                "error",
                "An NVIDIA GPU is present but no NVIDIA driver is installed",
                WHY_NO_DRIVER,
                INSTALL_DRIVER,
                details,
            )
        ]
    if not_loaded:
        return [
            Finding(
                "driver.module_not_loaded",
                "error",
                "The nvidia kernel module is not loaded",
                WHY_NO_DRIVER,
                {
                    "any": [
                        "sudo modprobe nvidia && nvidia-smi",
                        "sudo dmesg | grep -iE 'nvidia|nvrm' | tail   # why it failed to load",
                    ],
                    "debian": [
                        "sudo apt install -y linux-headers-$(uname -r) && sudo dkms autoinstall   # rebuild for the running kernel",
                        "sudo reboot",
                    ],
                    "rhel": ["sudo dnf install -y kernel-devel-$(uname -r) && sudo dkms autoinstall", "sudo reboot"],
                },
                details,
            )
        ]
    return [
        Finding(
            "driver.nvml_failed",
            "error",
            f"NVML could not start: {message}",
            WHY_NO_DRIVER,
            {"any": _nvml_diagnostics(message)},
            details,
        )
    ]


def _nvml_diagnostics(message: str | None) -> list[str]:
    """What to run when NVML fails for a reason no rule knows: its own view, the kernel log, the knowledge base."""
    return ["nvidia-smi", "sudo dmesg | grep -iE 'nvidia|nvrm|xid' | tail", f'mopt doctor --explain "{message}"']


def _nvml_missing_beside_a_working_gpu(snap: Snapshot, message: str | None, details: dict[str, Any]) -> Finding:
    """NVML failed but torch runs on the GPU: nothing CUDA needs is missing, so a warning, not the error that
    says inference will fail. The usual cause is a container started with NVIDIA_DRIVER_CAPABILITIES=compute,
    which mounts libcuda but not libnvidia-ml or nvidia-smi (those come with `utility`)."""
    capabilities = (snap.data("container_toolkit").get("env") or {}).get("NVIDIA_DRIVER_CAPABILITIES")
    given = {c.strip() for c in (capabilities or "").split(",") if c.strip()}
    why = (
        "CUDA works, so inference runs; without NVML nvidia-smi does not work, this report cannot read the GPU's "
        "memory, clocks, power or PCIe link, and tools that query the GPU through NVML fail or guess."
    )
    if snap.data("container_toolkit").get("in_container") and given and not given & {"utility", "all"}:
        why += f" NVIDIA_DRIVER_CAPABILITIES is {capabilities!r}: without 'utility' the container gets no NVML."
        fix = [
            f"docker run --gpus all -e NVIDIA_DRIVER_CAPABILITIES={','.join(sorted(given | {'utility'}))} ...",
            "Kubernetes or compose: add utility to the container's NVIDIA_DRIVER_CAPABILITIES",
        ]
    elif snap.error("nvml")[0] == "NVMLError_LibraryNotFound":
        fix = ["ldconfig -p | grep libnvidia-ml   # NVML ships with the driver: reinstall its utils package if missing"]
    else:
        fix = _nvml_diagnostics(message)
    return Finding(
        "driver.nvml_failed",
        "warn",
        f"NVML could not start ({message}), but torch uses the GPU",
        why,
        {"any": fix},
        {**details, "nvidia_driver_capabilities": capabilities},
    )


def _secure_boot_blocks(snap: Snapshot) -> bool:
    """Secure Boot on, the module installed (modinfo found its file) but unsigned, and not loaded. Without
    the module file there is nothing for Secure Boot to refuse: the driver is not installed."""
    sb = snap.data("secure_boot")
    return (
        bool(sb.get("secure_boot"))
        and bool(sb.get("nvidia_module_file"))
        and not sb.get("nvidia_module_signer")
        and snap.module_loaded("nvidia") is not True
        and not snap.nvml_ok
    )


def rule_secure_boot(snap: Snapshot) -> list[Finding]:
    """Secure Boot on + nvidia module not loaded + module unsigned = the firmware refuses it."""
    if not snap.gpu_hardware_seen or snap.is_wsl or not _secure_boot_blocks(snap):
        return []
    sb = snap.data("secure_boot")
    return [
        Finding(
            "driver.secure_boot_unsigned",
            "error",
            "Secure Boot is on and the nvidia module is not signed, so the kernel refuses to load it",
            WHY_NO_DRIVER + " The module is installed; only its signature is missing.",
            {
                "any": ["mokutil --sb-state", "Or disable Secure Boot in the firmware setup"],
                "debian": [
                    "sudo mokutil --import /var/lib/shim-signed/mok/MOK.der   # DKMS's signing key; choose a one-time password",
                    "sudo reboot   # pick 'Enroll MOK' in the MOK manager, enter the password",
                    "Or use Ubuntu's signed prebuilt modules instead: sudo apt install linux-modules-nvidia-580-generic",
                ],
                "rhel": [
                    "sudo mokutil --import /var/lib/dkms/mok.pub",
                    "sudo reboot   # enroll the key in the MOK manager",
                    "Or use NVIDIA's precompiled signed modules instead: sudo dnf module install nvidia-driver:latest",
                ],
            },
            {
                "secure_boot": True,
                "module_file": sb.get("nvidia_module_file"),
                "module_signer": sb.get("nvidia_module_signer"),
            },
        )
    ]


def rule_nouveau(snap: Snapshot) -> list[Finding]:
    """nouveau loaded or bound to an NVIDIA GPU blocks the NVIDIA driver."""
    bound = [d["address"] for d in snap.pci_gpus if d.get("driver") == "nouveau"]
    if not (snap.module_loaded("nouveau") or bound):
        return []
    blacklist = (
        "printf 'blacklist nouveau\\noptions nouveau modeset=0\\n' | sudo tee /etc/modprobe.d/blacklist-nouveau.conf"
    )
    return [
        Finding(
            "driver.nouveau_loaded",
            "error",
            "The open-source nouveau driver is loaded" + (f" and holds {', '.join(bound)}" if bound else ""),
            "nouveau cannot run CUDA, and while it holds the GPU the NVIDIA driver cannot bind to it.",
            {
                "debian": [blacklist, "sudo update-initramfs -u", "sudo reboot"],
                "rhel": [
                    blacklist,
                    "sudo dracut --force",
                    "sudo grubby --update-kernel=ALL --args='rd.driver.blacklist=nouveau modprobe.blacklist=nouveau'",
                    "sudo reboot",
                ],
            },
            {"nouveau_module": snap.module_loaded("nouveau"), "bound_to": bound},
        )
    ]


def rule_nvidia_uvm(snap: Snapshot) -> list[Finding]:
    """CUDA needs nvidia_uvm and /dev/nvidia-uvm; NVML (nvidia-smi) does not, so it can look fine."""
    if snap.is_wsl or snap.gpu_usable or snap.module_loaded("nvidia") is not True:
        return []
    if snap.module_loaded("nvidia_uvm") is not False and snap.dev_node("/dev/nvidia-uvm"):
        return []
    return [
        Finding(
            "driver.nvidia_uvm_missing",
            "error",
            "nvidia_uvm is not loaded (/dev/nvidia-uvm missing): nvidia-smi works but CUDA cannot start",
            "CUDA's unified memory module is required by every CUDA program; torch then reports 'CUDA unknown error' or no devices.",
            {
                "any": [
                    "sudo modprobe nvidia_uvm",
                    "sudo nvidia-modprobe -u -c=0   # creates /dev/nvidia-uvm",
                    "echo nvidia_uvm | sudo tee /etc/modules-load.d/nvidia-uvm.conf   # load it at boot",
                ]
            },
            {"nvidia_uvm_loaded": snap.module_loaded("nvidia_uvm"), "dev_nvidia_uvm": snap.dev_node("/dev/nvidia-uvm")},
        )
    ]


def rule_dev_permissions(snap: Snapshot) -> list[Finding]:
    """Device nodes that exist but this user cannot open."""
    nodes = snap.data("dev_nodes").get("nodes") or {}
    denied = [
        p
        for p, acc in nodes.items()
        if p != "/dev/dxg" and not (acc.get("read") and acc.get("write")) and "caps" not in p
    ]
    if not denied:
        return []
    return [
        Finding(
            "driver.device_permissions",
            "error",
            f"This user cannot open {', '.join(denied)}",
            "CUDA opens these files for every program; without read/write access it sees no GPU.",
            {"any": ["ls -l /dev/nvidia*", "sudo usermod -aG video,render $USER   # then log out and in again"]},
            {"denied": denied},
        )
    ]


def rule_persistence(snap: Snapshot) -> list[Finding]:
    """Datacenter GPUs should keep the driver initialised between programs."""
    off = [
        d["index"]
        for d in snap.devices
        if d.get("persistence_mode") is False and (gpu_spec(d.get("name")) or {}).get("class") == "datacenter"
    ]
    if not off or snap.is_wsl:
        return []
    return [
        Finding(
            "driver.persistence_off",
            "warn",
            f"Persistence mode is off on GPU {', '.join(map(str, off))}",
            "Without it the driver tears the GPU down whenever no program uses it: each server start pays seconds of re-initialisation, and clock/ECC settings can be lost.",
            {"any": ["sudo systemctl enable --now nvidia-persistenced   # or: sudo nvidia-smi -pm 1"]},
            {"gpus": off},
        )
    ]
