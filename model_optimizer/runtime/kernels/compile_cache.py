"""Triton's compiled-kernel cache in a folder we own, keyed by versions and GPU.

Our kernels (attention, rotary, the fused element-wise ops, sampling) are Triton kernels compiled
at start-up: most of a cold start on a GPU (README "Start-up"). Triton caches its output on disk,
but in a folder it names itself (~/.triton/cache, one folder for every Triton version and GPU).
We point it at

    <root>/<key>/triton   root: $MOPT_COMPILE_CACHE_DIR, else $XDG_CACHE_HOME/model-optimizer/compile,
                          else ~/.cache/model-optimizer/compile
                          key: torch, Triton and model_optimizer versions and the GPU's name

so a second start reads what the first compiled, and a new version (or another GPU model) never
reads a stale entry. A user's own TRITON_CACHE_DIR always wins: we set it only where it is unset, at
engine start, before anything compiles. Worker processes (tensor parallelism) inherit it.

Nothing in the engine uses torch.compile (layers/fusion.py runs our own kernels), so there is no
inductor cache to place and enforce_eager changes nothing here: it only turns CUDA graphs off.
"""

from __future__ import annotations

import hashlib
import os
import re
from pathlib import Path
from typing import Any

CACHE_DIR_ENV = "MOPT_COMPILE_CACHE_DIR"
"""Root folder for the compile caches; one sub-folder per key is made beneath it."""
TRITON_CACHE_ENV = "TRITON_CACHE_DIR"
"""Triton's own variable for its cache folder: we set it where the user has not."""
CACHE_VARIABLES = (TRITON_CACHE_ENV,)
"""Every cache variable configure_compile may set (tests clear them to start clean)."""


def cache_root() -> Path:
    if os.environ.get(CACHE_DIR_ENV):
        return Path(os.environ[CACHE_DIR_ENV]).expanduser()
    base = Path(os.environ["XDG_CACHE_HOME"]) if os.environ.get("XDG_CACHE_HOME") else Path.home() / ".cache"
    return base / "model-optimizer" / "compile"


def cache_key(gpu_name: str | None) -> str:
    """Readable and collision-free: the versions and GPU, cleaned for a folder name, plus a short hash of them."""
    from model_optimizer.common.version import __version__

    parts = [f"torch-{_version('torch')}", f"triton-{_version('triton')}", f"mopt-{__version__}"]
    parts.append(gpu_name or "cpu")
    raw = "_".join(parts)
    digest = hashlib.sha256(raw.encode()).hexdigest()[:8]
    return re.sub(r"[^A-Za-z0-9._-]+", "-", raw) + "-" + digest


def configure_compile(config: Any) -> dict[str, str]:
    """At engine start: point an unset TRITON_CACHE_DIR at our folder.

    Returns the variables this call set (empty when the user set them). On the CPU the key says
    "cpu": nothing compiles there unless Triton's interpreter runs, but the folder is the same."""
    if os.environ.get(TRITON_CACHE_ENV):
        return {}
    folder = cache_root() / cache_key(_gpu_name(getattr(config, "device", "auto"))) / "triton"
    os.environ[TRITON_CACHE_ENV] = str(folder)
    return {TRITON_CACHE_ENV: str(folder)}


def _gpu_name(device: str) -> str | None:
    """The CUDA device's name, None on the CPU (asked only when the engine will use CUDA anyway)."""
    if device == "cpu":
        return None
    import torch

    if not torch.cuda.is_available():
        return None
    return torch.cuda.get_device_name(torch.cuda.current_device())


def _version(package: str) -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(package)
    except PackageNotFoundError:
        return "none"
