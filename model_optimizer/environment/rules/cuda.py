"""Rules about the CUDA user-space stack: torch build vs driver, torch seeing the GPU,
kernels for this GPU's architecture, libcuda, Triton's minimum compute capability."""

from __future__ import annotations

from model_optimizer.environment.explain import explain
from model_optimizer.environment.findings import Finding
from model_optimizer.environment.knowledge import (
    best_torch_build,
    cc_at_least,
    load,
    min_driver_for_cuda,
    min_driver_minor_compat,
    newest_tested_torch,
    torch_build_for_gpu,
    version_tuple,
)
from model_optimizer.environment.snapshot import Snapshot

UPGRADE_DRIVER = {
    "debian": [
        "sudo apt update && sudo apt install -y nvidia-driver-{branch}   # or: sudo ubuntu-drivers install",
        "sudo reboot",
    ],
    "rhel": ["sudo dnf module install -y nvidia-driver:{branch}-dkms", "sudo reboot"],
    "wsl": ["Update the NVIDIA driver on Windows, then `wsl --shutdown`."],
}


def _torch_install(torch_version: str | None, build: str | None) -> str:
    """The pip line that puts this torch release (any, without `torch_version`: the index's newest) of CUDA
    variant `build` in place of the installed one: --force-reinstall, as pip counts 2.11.0+cu128 as newer
    than 2.11.0+cu126 and would keep it."""
    build = build or "cu126"
    wanted = f"'torch=={torch_version.split('+')[0]}'" if torch_version else "torch"
    return f"pip install --force-reinstall {wanted} --index-url https://download.pytorch.org/whl/{build}"


def _fresh_torch_install(snap: Snapshot) -> str:
    """The pip line for a first torch: the newest release this package is tested on, in the CUDA variant the
    driver runs best; the CPU wheels where there is no NVIDIA GPU (PyPI's default Linux wheel brings gigabytes
    of CUDA libraries that would never run)."""
    release = newest_tested_torch()
    wanted = f"'torch=={release}.*'"
    if not snap.gpu_hardware_seen:
        return f"pip install {wanted} --index-url https://download.pytorch.org/whl/cpu   # no NVIDIA GPU: the CPU build"
    build = best_torch_build(release, snap.driver_cuda)
    if build is None:
        return (
            f"pip install {wanted}   # after the driver is fixed or upgraded; mopt doctor then names the CUDA variant"
        )
    return f"pip install {wanted} --index-url https://download.pytorch.org/whl/{build}"


def driver_branch(torch_cuda: str, need_full: str | None) -> str:
    """The driver branch torch's CUDA needs: the production branch of its major version, or the branch of the
    driver that shipped with this CUDA release when that is newer (12.9 needs 575, while the 12.x production
    branch is 570: recommending 570 to a 570 user who needs 575 fixes nothing)."""
    production = load("version_matrix")["recommended_driver_branch"].get(str(version_tuple(torch_cuda)[0]), "580")
    shipped = str(version_tuple(need_full)[0]) if need_full else production
    return max(production, shipped, key=int)


def install_branch(torch_cuda: str, need_full: str | None) -> str:
    """The driver branch doctor's fix installs: the one torch's CUDA needs (`driver_branch`), at least the
    long-term-support branch, as the production branches before it get no more fixes."""
    lts = load("version_matrix")["lts_driver_branch"]["branch"]
    return max(driver_branch(torch_cuda, need_full), lts, key=int)


def rule_torch_build(snap: Snapshot) -> list[Finding]:
    """torch installed, built with CUDA (not CPU-only or ROCm) when an NVIDIA GPU is here."""
    torch = snap.torch
    if snap.error("torch")[0]:
        return [
            Finding(
                "torch.probe_failed",
                "warn",
                f"Could not inspect torch: {snap.error('torch')[1]}",
                "mopt needs torch to run models.",
                {"any": ["python -c 'import torch; print(torch.__version__)'"]},
            )
        ]
    if not torch.get("installed"):
        return [
            Finding(
                "torch.missing",
                "error",
                "torch is not installed in this Python",
                "mopt runs every model through torch.",
                {"any": [_fresh_torch_install(snap)]},
                {"error": torch.get("error")},
            )
        ]
    if not (snap.gpu_hardware_seen and snap.nvml_ok):
        return []
    build = best_torch_build(torch.get("version"), snap.driver_cuda)
    if torch.get("hip"):
        return [
            Finding(
                "torch.rocm_build",
                "error",
                f"torch {torch['version']} is a ROCm (AMD) build, but the GPU is NVIDIA",
                "A ROCm build cannot drive an NVIDIA GPU; everything runs on the CPU.",
                {"any": [_torch_install(torch.get("version"), build)]},
            )
        ]
    if not torch.get("cuda"):
        return [
            Finding(
                "torch.cpu_build",
                "error",
                f"torch {torch.get('version')} is a CPU-only build, but an NVIDIA GPU is present",
                "mopt would run on the CPU, 10-100x slower, with the GPU idle.",
                {"any": [_torch_install(torch.get("version"), build)]},
                {"best_build_for_driver": build},
            )
        ]
    return []


def rule_cuda_compat(snap: Snapshot) -> list[Finding]:
    """The CUDA torch was built for must be runnable by the driver."""
    torch_cuda, driver = snap.torch.get("cuda"), snap.driver_version
    if not (torch_cuda and driver and snap.gpu_hardware_seen):
        return []
    driver_cuda = snap.driver_cuda
    need_full, need_any = min_driver_for_cuda(torch_cuda), min_driver_minor_compat(torch_cuda)
    branch = install_branch(torch_cuda, need_full)
    build = best_torch_build(snap.torch.get("version"), driver_cuda)
    details = {
        "torch_cuda": torch_cuda,
        "driver_version": driver,
        "driver_cuda": driver_cuda,
        "min_driver_full": need_full,
        "min_driver_minor_compat": need_any,
        "torch_build_for_this_driver": build,
    }
    too_old = (need_any and version_tuple(driver) < version_tuple(need_any)) or (
        driver_cuda and version_tuple(torch_cuda)[:1] > version_tuple(driver_cuda)[:1]
    )
    if too_old:
        fix = {k: [c.format(branch=branch) for c in v] for k, v in UPGRADE_DRIVER.items()}
        if build:  # the alternative comes after the driver upgrade of each OS family
            alternative = f"Or keep the driver and install the torch build it can run: {_torch_install(snap.torch.get('version'), build)}"
            fix = {k: v + [alternative] for k, v in fix.items()}
        return [
            Finding(
                "cuda.driver_too_old",
                "error",
                f"torch is built for CUDA {torch_cuda}, which needs driver >= {need_any}; driver {driver} supports CUDA {driver_cuda or '?'}",
                "CUDA initialisation fails ('CUDA driver version is insufficient'), so nothing runs on the GPU.",
                fix,
                details,
            )
        ]
    if driver_cuda and version_tuple(torch_cuda)[:2] > version_tuple(driver_cuda)[:2]:
        return [
            Finding(
                "cuda.minor_version_compat",
                "warn",
                f"torch's CUDA {torch_cuda} is newer than the driver's CUDA {driver_cuda}: runs under minor-version compatibility",
                "Precompiled kernels run, but code JIT-compiled from PTX built by the newer toolkit (Triton kernels, some extensions) can fail with CUDA_ERROR_UNSUPPORTED_PTX_VERSION.",
                {k: [c.format(branch=branch) for c in v] for k, v in UPGRADE_DRIVER.items()},
                details,
            )
        ]
    return [
        Finding(
            "cuda.compat_ok",
            "ok",
            f"torch's CUDA {torch_cuda} runs on driver {driver} (CUDA {driver_cuda})",
            details=details,
        )
    ]


def rule_torch_sees_gpu(snap: Snapshot) -> list[Finding]:
    """NVML sees GPUs but torch does not: CUDA_VISIBLE_DEVICES hiding them all, else torch's own error
    explained through the knowledge base."""
    torch = snap.torch
    if not (snap.nvml_ok and snap.devices and torch.get("installed") and torch.get("cuda")) or snap.gpu_usable:
        return []
    text = "\n".join(filter(None, [torch.get("init_error"), *torch.get("warnings", [])]))
    hidden = _hidden_by_cuda_visible_devices(snap, text)
    if hidden:
        return [hidden]
    matches = explain(text) if text.strip() else []
    fix = matches[0].fix if matches else {"any": ["python -c 'import torch; torch.cuda.init()'   # shows the error"]}
    return [
        Finding(
            "torch.cuda_unavailable",
            "error",
            f"NVML sees {len(snap.devices)} GPU(s) but torch cannot use them"
            + (f": {matches[0].title}" if matches else ""),
            "Every model would run on the CPU.",
            fix,
            {"torch_error": text, "knowledge_base": [m.id for m in matches]},
        )
    ]


def _hidden_by_cuda_visible_devices(snap: Snapshot, torch_error: str) -> Finding | None:
    """CUDA reads CUDA_VISIBLE_DEVICES up to its first entry that names no GPU: an empty value, -1, or an index
    or UUID that does not exist there leaves torch no device at all (recorded on an H100: torch then says only
    'No CUDA GPUs are available'). None when the variable is unset or its first entry names an NVML GPU."""
    env = snap.data("system").get("env") or {}
    if "CUDA_VISIBLE_DEVICES" not in env:
        return None
    value = env["CUDA_VISIBLE_DEVICES"]
    first = value.split(",")[0].strip()
    gpus = [d for d in snap.devices if not d.get("error")]
    indices = [str(d["index"]) for d in gpus]
    uuids = [str(d.get("uuid") or "") for d in gpus]
    if (
        first in indices
        or first.startswith("MIG-")
        or (first.startswith("GPU-") and any(u.startswith(first) for u in uuids))
    ):
        return None
    return Finding(
        "torch.hidden_by_cuda_visible_devices",
        "error",
        f"CUDA_VISIBLE_DEVICES={value!r} hides every GPU from torch; NVML sees GPU {', '.join(indices)}",
        "CUDA stops reading the list at its first entry that names no GPU here (an empty value, -1, an index or "
        "UUID that does not exist), so torch finds no device and every model runs on the CPU.",
        {
            "any": [
                "unset CUDA_VISIBLE_DEVICES   # every GPU",
                f"export CUDA_VISIBLE_DEVICES={','.join(indices)}   # or some of these indices; nvidia-smi -L lists their UUIDs",
            ]
        },
        {"cuda_visible_devices": value, "nvml_indices": indices, "torch_error": torch_error},
    )


def rule_arch_support(snap: Snapshot) -> list[Finding]:
    """torch's compiled architectures must cover each GPU's compute capability."""
    arch_list = snap.torch.get("arch_list") or []
    if not (arch_list and snap.torch.get("cuda")):
        return []
    findings = []
    for dev in snap.devices or snap.torch.get("devices") or []:
        cc = dev.get("compute_capability")
        if not cc:
            continue
        major, minor = version_tuple(cc)[:2]
        parsed = [_parse_arch(a) for a in arch_list]
        # a cubin runs on its own major version at an equal or higher minor; PTX on anything newer
        cubin = any(kind == "sm" and m == major and n <= minor for kind, m, n in parsed)
        ptx = any(kind == "compute" and (m, n) <= (major, minor) for kind, m, n in parsed)
        if cubin:
            continue
        if ptx:
            findings.append(
                Finding(
                    "torch.ptx_only",
                    "warn",
                    f"GPU {dev.get('index')} (sm_{major}{minor}) has no prebuilt torch kernels; they are JIT-compiled from PTX",
                    "The first run compiles for minutes and some kernels run slower.",
                    {"any": ["pip install --upgrade torch   # a release built for this GPU"]},
                    {"arch_list": arch_list, "compute_capability": cc},
                )
            )
        else:
            findings.append(
                Finding(
                    "torch.no_kernel_image",
                    "error",
                    f"This torch has no kernels for GPU {dev.get('index')} (compute capability {cc}, sm_{major}{minor})",
                    "Every CUDA op fails with 'no kernel image is available for execution on the device'.",
                    {"any": [_kernels_install(snap, cc)]},
                    {"arch_list": arch_list, "compute_capability": cc},
                )
            )
    return findings


def _kernels_install(snap: Snapshot, cc: str) -> str:
    """The pip line for a torch build with kernels for compute capability `cc` that this driver runs: torch's
    CUDA 12.8+ wheels dropped Maxwell and Pascal (and Volta in some releases), CUDA 12.6 and older lack
    Blackwell, so the variant follows the GPU (knowledge.torch_build_for_gpu)."""
    sm = "sm_" + cc.replace(".", "")
    build, of_this_release = torch_build_for_gpu(snap.torch.get("version"), cc, snap.driver_cuda)
    if build is None:
        return f"No published torch wheel has kernels for {sm}: build torch from source with TORCH_CUDA_ARCH_LIST={cc}"
    return _torch_install(snap.torch.get("version") if of_this_release else None, build) + f"   # wheels with {sm}"


def _parse_arch(arch: str) -> tuple[str, int, int]:
    """'sm_90a' -> ('sm', 9, 0); 'compute_120' -> ('compute', 12, 0)."""
    kind, _, digits = arch.partition("_")
    digits = digits.rstrip("af")
    if not digits.isdigit() or len(digits) < 2:
        return kind, -1, -1
    return kind, int(digits[:-1]), int(digits[-1])


def rule_libcuda(snap: Snapshot) -> list[Finding]:
    """The driver's user-space CUDA library must be loadable."""
    lib = snap.data("libcuda")
    if not (snap.nvml_ok and lib) or lib.get("loaded"):
        return []
    return [
        Finding(
            "cuda.libcuda_missing",
            "error",
            "NVML works but libcuda.so.1 cannot be loaded",
            "torch, Triton and every CUDA program load libcuda.so.1; in containers this means the 'compute' capability was not passed.",
            {
                "any": [
                    "ldconfig -p | grep libcuda",
                    "docker run --gpus all -e NVIDIA_DRIVER_CAPABILITIES=compute,utility ...   # containers",
                ],
                "debian": ["sudo apt install libnvidia-compute-$(cut -d. -f1 /sys/module/nvidia/version)"],
                "rhel": ["sudo dnf install nvidia-driver-cuda-libs"],
                "wsl": ["export LD_LIBRARY_PATH=/usr/lib/wsl/lib:$LD_LIBRARY_PATH && sudo ldconfig"],
            },
            {"load_errors": lib.get("load_errors")},
        )
    ]


def rule_triton_cc(snap: Snapshot) -> list[Finding]:
    """mopt's GPU kernels are Triton kernels: they need compute capability 8.0+."""
    minimum = load("version_matrix")["software_min_cc"]["triton"]
    old = [d for d in snap.devices if d.get("compute_capability") and not cc_at_least(d["compute_capability"], minimum)]
    if not old:
        return []
    return [
        Finding(
            "gpu.below_triton_minimum",
            "warn",
            f"GPU {', '.join(str(d['index']) for d in old)} has compute capability below {minimum}",
            "Triton (mopt's attention and fused kernels) supports compute capability 8.0+; older GPUs fall back to slower torch paths and lack bf16.",
            {"any": ["Use --dtype float16; expect the reference (torch) attention path"]},
            {"gpus": [(d["index"], d["compute_capability"]) for d in old]},
        )
    ]
