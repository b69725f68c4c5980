"""The CUDA runtime base image for the container, chosen from doctor's version matrix.

torch wheels carry their own CUDA libraries, so what the host must provide is a driver new enough for
the CUDA release the wheel was built with. We take the newest torch release in the matrix that this
package is tested on (the matrix's newest_tested_torch: doctor knows newer ones, an image does not install
them), and
of its CUDA builds the newest one the host driver runs (the middle build when the driver is unknown).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from importlib import resources

from model_optimizer.environment.knowledge import newest_tested_torch
from model_optimizer.environment.rules.cuda import driver_branch

BASE_IMAGE_TAGS = {"12.6": "12.6.3", "12.8": "12.8.1", "12.9": "12.9.1", "13.0": "13.0.0"}
"""CUDA release -> the patch release of its nvidia/cuda runtime image on Ubuntu 24.04."""

VLLM_IMAGE = "vllm/vllm-openai:v0.14.1"
VLLM_IMAGE_CUDA = "12.9"
"""The vLLM image `--engine vllm` runs, and the CUDA release it is built with. v0.14 is the first release
with every flag vllm_flags.TRANSLATED can emit (checked in the 0.14.1 wheel's engine/arg_utils.py and
entrypoints/openai/cli_args.py): --default-chat-template-kwargs came in v0.14.0 (vLLM PR #31343, not in
0.13.0), --stream-interval and --kv-offloading-size in v0.11.1 (PR #27869; not in 0.11.0). CUDA 12.9: the
v0.14.0 release notes build the default wheel for cu129, and the v0.14.1 image asks nvidia-container-cli for
cuda>=12.9 (microsoft/VibeVoice#352)."""


@dataclass(frozen=True)
class CudaChoice:
    cuda: str
    """CUDA release, e.g. "12.8"."""
    torch: str
    """torch release whose wheels the image installs, e.g. "2.11"."""
    min_driver: str
    """Oldest NVIDIA driver that runs this CUDA release with every feature."""
    compat_driver: str
    """Oldest driver of the same major family (minor-version compatibility: no PTX newer than the driver)."""
    note: str = ""
    """Why the host driver runs this build only through minor-version compatibility, when it does."""

    @property
    def torch_variant(self) -> str:
        return "cu" + self.cuda.replace(".", "")

    @property
    def base_image(self) -> str:
        return f"nvidia/cuda:{BASE_IMAGE_TAGS[self.cuda]}-runtime-ubuntu24.04"

    @property
    def torch_index(self) -> str:
        return f"https://download.pytorch.org/whl/{self.torch_variant}"


def version_matrix() -> dict:
    return json.loads(resources.files("model_optimizer.environment").joinpath("data/version_matrix.json").read_text())


def _key(version: str) -> tuple[int, ...]:
    return tuple(int(part) for part in version.split(".") if part.isdigit())


def min_driver(cuda: str) -> str:
    """The oldest driver for `cuda` from the matrix's CUDA toolkit table."""
    for row in version_matrix()["cuda_toolkits"]:
        if row["cuda"] == cuda:
            return row["min_driver"]
    raise ValueError(f"CUDA {cuda} is not in doctor's version matrix")


def choose_cuda(driver: str | None = None, cuda: str | None = None) -> CudaChoice:
    """The CUDA build to install: `cuda` if given, else the newest one `driver` runs, else torch's default."""
    matrix = version_matrix()
    builds = {k: v for k, v in matrix["torch_cuda_builds"].items() if not k.startswith("_")}
    tested = _key(newest_tested_torch())
    torch = max((release for release in builds if _key(release) <= tested), key=_key)
    variants = [f"{v[2:-1]}.{v[-1]}" for v in builds[torch]]  # "cu128" -> "12.8"
    variants = [v for v in variants if v in BASE_IMAGE_TAGS]
    note = ""
    if cuda is not None:
        if cuda not in variants:
            raise ValueError(f"cuda must be one of {', '.join(variants)} (torch {torch} builds), got {cuda!r}")
        chosen = cuda
    elif driver is not None:
        runnable = [v for v in variants if _key(min_driver(v)) <= _key(driver)]
        if runnable:
            chosen = max(runnable, key=_key)
        else:  # none in full: the oldest build the driver runs through minor-version compatibility, if any
            compat = [v for v in variants if _key(_compat_driver(matrix, v)) <= _key(driver)]
            oldest = min(compat or variants, key=_key)
            branch = driver_branch(oldest, min_driver(oldest))
            if not compat:
                raise ValueError(
                    f"driver {driver} is older than {_compat_driver(matrix, oldest)}, the oldest that runs CUDA "
                    f"{oldest} (the oldest torch {torch} build) even through CUDA minor-version compatibility; "
                    f"install driver branch {branch} or newer"
                )
            chosen = oldest
            note = (
                f"Driver {driver} is older than {min_driver(chosen)}, which CUDA {chosen} needs in full: it runs "
                f"this build through CUDA minor-version compatibility (>= {_compat_driver(matrix, chosen)}), "
                f"without PTX newer than the driver; install driver branch {branch} or newer for full support."
            )
    else:
        chosen = builds[torch][len(builds[torch]) // 2]
        chosen = f"{chosen[2:-1]}.{chosen[-1]}"
    return CudaChoice(chosen, torch, min_driver(chosen), _compat_driver(matrix, chosen), note)


def _compat_driver(matrix: dict, cuda: str) -> str:
    """The oldest driver that runs `cuda` through minor-version compatibility (that of its major family)."""
    return matrix["minor_version_compat"][cuda.split(".")[0]]


def vllm_driver_note(driver: str | None) -> str:
    """A warning when `driver` is older than the vLLM image's CUDA release needs (empty otherwise, and
    for an unknown driver). The image is fixed, so there is no build to fall back to; nvidia-container-cli
    checks the image's CUDA requirement when the container starts."""
    if driver is None or _key(driver) >= _key(min_driver(VLLM_IMAGE_CUDA)):
        return ""
    branch = driver_branch(VLLM_IMAGE_CUDA, min_driver(VLLM_IMAGE_CUDA))
    return (
        f"Driver {driver} is older than {min_driver(VLLM_IMAGE_CUDA)}, which {VLLM_IMAGE} (CUDA {VLLM_IMAGE_CUDA}) "
        f"needs: the container is likely refused at start on that host; install driver branch {branch} or newer "
        "there (without --driver, the driver checked is this machine's: give the deployment host's)."
    )


def local_driver() -> str | None:
    """This machine's NVIDIA driver version through NVML, or None without a driver."""
    try:
        import pynvml

        pynvml.nvmlInit()
        try:
            version = pynvml.nvmlSystemGetDriverVersion()
        finally:
            pynvml.nvmlShutdown()
    except Exception:  # noqa: BLE001 - no library, no driver, no GPU: unknown
        return None
    return version.decode() if isinstance(version, bytes) else str(version)
