"""The doctor's reference data (data/*.json) and the lookups rules make in it: driver needed
for a CUDA version, features of a compute capability, a GPU's datasheet by name."""

from __future__ import annotations

import json
import re
from functools import cache
from importlib import resources
from typing import Any


@cache
def load(name: str) -> dict[str, Any]:
    """One data file of the package, e.g. load('gpus')."""
    text = (
        resources.files("model_optimizer.environment")
        .joinpath("data")
        .joinpath(f"{name}.json")
        .read_text(encoding="utf-8")
    )
    return json.loads(text)


def version_tuple(text: str | None) -> tuple[int, ...]:
    """'570.86.15' -> (570, 86, 15); '12.8' -> (12, 8); unparsable -> ()."""
    if not text:
        return ()
    parts = re.findall(r"\d+", str(text).split("+")[0])
    return tuple(int(p) for p in parts)


def cuda_from_int(value: int | None) -> str | None:
    """NVML/CUDA encode versions as 1000*major + 10*minor: 12040 -> '12.4'."""
    if not value:
        return None
    return f"{value // 1000}.{(value % 1000) // 10}"


def min_driver_for_cuda(cuda: str) -> str | None:
    """Driver that ships with this CUDA toolkit (full support, PTX included)."""
    want = version_tuple(cuda)[:2]
    rows = [r for r in load("version_matrix")["cuda_toolkits"] if version_tuple(r["cuda"])[:2] <= want]
    return rows[-1]["min_driver"] if rows else None


def min_driver_minor_compat(cuda: str) -> str | None:
    """Oldest driver that runs programs of this CUDA major version at all (minor-version compatibility)."""
    major = str(version_tuple(cuda)[0]) if version_tuple(cuda) else ""
    return load("version_matrix")["minor_version_compat"].get(major)


def cc_at_least(cc: str | None, minimum: str) -> bool:
    return bool(cc) and version_tuple(cc) >= version_tuple(minimum)


def cc_features(cc: str | None) -> list[str]:
    """Feature names a compute capability has: bf16 from 8.0, fp8 from 8.9, ..."""
    return [f["feature"] for f in load("version_matrix")["compute_capability_features"] if cc_at_least(cc, f["min_cc"])]


def gpu_spec(name: str | None) -> dict[str, Any] | None:
    """The datasheet entry whose `match` regex fits the device name (first match wins)."""
    if not name:
        return None
    for entry in load("gpus")["gpus"]:
        if re.search(entry["match"], name, re.IGNORECASE):
            return entry
    return None


def pcie_gbps(gen: int | None, width: int | None) -> float | None:
    """Usable one-direction PCIe bandwidth in GB/s for a link generation and width."""
    per_lane = load("gpus")["pcie_gbps_per_lane"].get(str(gen)) if gen else None
    return round(per_lane * width, 2) if per_lane and width else None


def torch_cuda_builds(torch_version: str | None) -> list[str]:
    """CUDA variants published for this torch release, e.g. ['cu126', 'cu128', 'cu130']."""
    key = ".".join(map(str, version_tuple(torch_version)[:2]))
    return list(load("version_matrix")["torch_cuda_builds"].get(key, []))


def newest_tested_torch() -> str:
    """The newest torch release this package is tested on (e.g. '2.13'): what a fresh install gets, though the
    data lists CUDA variants for newer ones."""
    return load("version_matrix")["newest_tested_torch"]["release"]


def best_torch_build(torch_version: str | None, driver_cuda: str | None) -> str | None:
    """The published cuXYZ variant of this torch the driver runs best (see `closest_runnable_build`)."""
    return closest_runnable_build(torch_cuda_builds(torch_version), driver_cuda)


def closest_runnable_build(builds: list[str], driver_cuda: str | None) -> str | None:
    """Of `builds` (oldest first), the newest one no newer than the driver's CUDA version; else the oldest of
    the same major version, which runs under minor-version compatibility with the smallest gap to the
    driver (the newest would need the most PTX the driver cannot JIT, and a fix that recommends it would
    trigger doctor's next warning)."""
    limit = version_tuple(driver_cuda)[:2]
    if not limit:
        return None
    full = [b for b in builds if _build_cuda(b) <= limit]
    if full:
        return full[-1]
    same_major = [b for b in builds if _build_cuda(b)[0] == limit[0]]
    return same_major[0] if same_major else None


def build_has_kernels(build: str, cc: str) -> bool:
    """Whether the wheels of CUDA variant `build` carry kernels for compute capability `cc` (data:
    torch_build_cc); False for a variant the data does not list."""
    span = load("version_matrix")["torch_build_cc"].get(build)
    if not span or not version_tuple(cc):
        return False
    oldest, newest = (version_tuple(v) for v in span)
    return oldest <= version_tuple(cc)[:2] and version_tuple(cc)[0] <= newest[0]


def torch_build_for_gpu(torch_version: str | None, cc: str, driver_cuda: str | None) -> tuple[str | None, bool]:
    """(cuXYZ variant with kernels for compute capability `cc`, whether it is one of this torch release's).
    Of the variants with the kernels, the one the driver runs best (`closest_runnable_build`), else the
    oldest: it needs the least driver. When this release publishes none (or is not in the data), the
    variants of any release are searched: the index then serves its newest torch, which has them."""
    own = torch_cuda_builds(torch_version)
    for builds, of_this_release in ((own, True), (_all_builds(), False)):
        fitting = [b for b in builds if build_has_kernels(b, cc)]
        if fitting:
            return closest_runnable_build(fitting, driver_cuda) or fitting[0], of_this_release
    return None, False


def _all_builds() -> list[str]:
    """Every CUDA variant the data knows kernels for, oldest CUDA first."""
    return sorted((b for b in load("version_matrix")["torch_build_cc"] if not b.startswith("_")), key=_build_cuda)


def _build_cuda(build: str) -> tuple[int, ...]:
    digits = build[2:]
    return (int(digits[:-1]), int(digits[-1]))
