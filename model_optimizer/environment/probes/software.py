"""User-space probes: nvidia-smi's full XML report, the CUDA driver library, the NVIDIA
container toolkit and Docker's runtimes, the versions of inference packages, and whether Python
keeps their bytecode."""

from __future__ import annotations

import ctypes
import ctypes.util
import glob
import importlib.util
import os
import sys
import xml.etree.ElementTree as ET
from importlib import metadata
from typing import Any

from model_optimizer.environment._util import run_cmd, which

PACKAGES = (
    "torch",
    "triton",
    "vllm",
    "tensorrt",
    "tensorrt_llm",
    "transformers",
    "flash-attn",
    "xformers",
    "nvidia-ml-py",
    "nvidia-cudnn-cu12",
    "nvidia-cudnn-cu13",
    "nvidia-cublas-cu12",
    "nvidia-cublas",
    "nvidia-nccl-cu12",
    "nvidia-nccl-cu13",
    "nvidia-cuda-runtime-cu12",
    "nvidia-cuda-runtime",
)


def probe_nvidia_smi() -> dict[str, Any]:
    """`nvidia-smi -q -x`, raw, with the few fields rules read parsed out."""
    exe = which("nvidia-smi")
    if not exe:
        return {"found": False}
    result = run_cmd([exe, "-q", "-x"], timeout_s=30)
    out: dict[str, Any] = {
        "found": True,
        "rc": result.get("rc"),
        "xml": result.get("stdout"),
        "stderr": result.get("stderr"),
        "timed_out": bool(result.get("timed_out")),
    }
    if result.get("rc") == 0:
        out["parsed"] = parse_nvidia_smi_xml(result.get("stdout") or "")
    else:
        out["message"] = ((result.get("stdout") or "") + (result.get("stderr") or "")).strip()
    return out


def parse_nvidia_smi_xml(xml: str) -> dict[str, Any]:
    """Driver and CUDA versions and per-GPU name and PCIe link from nvidia-smi's XML."""
    try:
        root = ET.fromstring(xml)
    except ET.ParseError as exc:
        return {"parse_error": str(exc)}
    gpus = []
    for gpu in root.findall("gpu"):
        link = "pci/pci_gpu_link_info"
        gpus.append(
            {
                "bus_id": gpu.get("id"),
                "name": gpu.findtext("product_name"),
                "pcie_current_gen": gpu.findtext(f"{link}/pcie_gen/current_link_gen"),
                "pcie_max_gen": gpu.findtext(f"{link}/pcie_gen/max_link_gen"),
                "pcie_current_width": gpu.findtext(f"{link}/link_widths/current_link_width"),
                "pcie_max_width": gpu.findtext(f"{link}/link_widths/max_link_width"),
            }
        )
    return {
        "driver_version": root.findtext("driver_version"),
        "cuda_version": root.findtext("cuda_version"),
        "gpus": gpus,
    }


def probe_libcuda() -> dict[str, Any]:
    """Can the CUDA driver library be loaded, and which CUDA version does it support?
    cuDriverGetVersion needs no cuInit, so this touches no GPU."""
    out: dict[str, Any] = {
        "find_library": ctypes.util.find_library("cuda"),
        "wsl_lib": sorted(glob.glob("/usr/lib/wsl/lib/libcuda.so*")),
    }
    for name in ("libcuda.so.1", "libcuda.so"):
        try:
            lib = ctypes.CDLL(name)
        except OSError as exc:
            out.setdefault("load_errors", {})[name] = str(exc)
            continue
        version = ctypes.c_int(0)
        rc = lib.cuDriverGetVersion(ctypes.byref(version))
        out.update(
            {"loaded": name, "cuDriverGetVersion_rc": rc, "cuda_driver_version": version.value if rc == 0 else None}
        )
        break
    else:
        out["loaded"] = None
    return out


def probe_container_toolkit() -> dict[str, Any]:
    """NVIDIA Container Toolkit binaries, CDI specs, Docker's runtimes, and whether we run in a container."""
    out: dict[str, Any] = {}
    for tool in ("nvidia-container-cli", "nvidia-ctk", "nvidia-container-runtime"):
        exe = which(tool)
        out[tool] = run_cmd([exe, "--version"], timeout_s=10) if exe else {"found": False}
    out["cdi_specs"] = sorted(glob.glob("/etc/cdi/*.yaml") + glob.glob("/etc/cdi/*.json") + glob.glob("/var/run/cdi/*"))
    docker = which("docker")
    if docker:
        info = run_cmd([docker, "info", "--format", "{{json .Runtimes}}|{{.DefaultRuntime}}"], timeout_s=15)
        stdout = (info.get("stdout") or "").strip()
        runtimes, _, default = stdout.partition("|")
        out["docker"] = {
            "found": True,
            "rc": info.get("rc"),
            "daemon_reachable": info.get("rc") == 0 and runtimes not in ("", "null"),
            "runtimes": runtimes,
            "default_runtime": default or None,
            "stderr": (info.get("stderr") or "")[-2000:],
        }
    else:
        out["docker"] = {"found": False}
    out["in_container"] = os.path.exists("/.dockerenv") or os.path.exists("/run/.containerenv")
    out["env"] = {
        k: os.environ[k]
        for k in ("NVIDIA_VISIBLE_DEVICES", "NVIDIA_DRIVER_CAPABILITIES", "CUDA_VISIBLE_DEVICES")
        if k in os.environ
    }
    return out


def probe_python_packages() -> dict[str, Any]:
    """Installed versions of the inference stack, read from package metadata (nothing imported)."""
    versions: dict[str, str | None] = {}
    for name in PACKAGES:
        try:
            versions[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            versions[name] = None
    return {"versions": versions}


BYTECODE_PACKAGES = ("torch", "triton", "transformers")
"""The large packages every engine process imports: compiling their source again costs each start seconds."""


def probe_bytecode() -> dict[str, Any]:
    """Per package of BYTECODE_PACKAGES (found, not imported): is the bytecode of its `__init__.py` cached
    where this interpreter looks (sys.pycache_prefix honoured), and could it be written there; and
    whether bytecode writing is off (PYTHONDONTWRITEBYTECODE, -B)."""
    packages = {}
    for name in BYTECODE_PACKAGES:
        try:
            spec = importlib.util.find_spec(name)
        except (ImportError, ValueError):
            spec = None
        if spec is not None and spec.origin and spec.origin.endswith(".py"):
            packages[name] = bytecode_state(spec.origin)
    return {"packages": packages, "dont_write_bytecode": sys.dont_write_bytecode, "pycache_prefix": sys.pycache_prefix}


def bytecode_state(source: str) -> dict[str, Any]:
    """{"source", "cached", "writable"} of one source file: its cached bytecode exists; the folder it would
    go to, or the nearest folder above it that exists, is writable by this user."""
    cached = importlib.util.cache_from_source(source)
    folder = os.path.dirname(cached)
    while folder and not os.path.isdir(folder) and os.path.dirname(folder) != folder:
        folder = os.path.dirname(folder)
    return {"source": source, "cached": os.path.exists(cached), "writable": os.access(folder, os.W_OK)}
