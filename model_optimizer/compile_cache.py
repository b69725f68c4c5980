"""Compiled-kernel caches in a folder we own, and no torch.compile at all under enforce_eager.

Triton (our kernels) and torch inductor (layers/fusion.py) compile kernels at start-up: seconds on
an H200 (kv sizing 7.9 s of a 34.5 s cold start, mostly compilation). Both cache their output on
disk, but in folders they name themselves (/tmp/torchinductor_<user> is wiped by many machines'
reboots, and one folder serves every torch and Triton version). We point both at

    <root>/<key>      root: $MOPT_COMPILE_CACHE_DIR, else $XDG_CACHE_HOME/model-optimizer/compile,
                      else ~/.cache/model-optimizer/compile
                      key: torch, Triton and model_optimizer versions and the GPU's name

so a second start reads what the first compiled, and a new version (or another GPU model) never
reads a stale entry. A user's own TRITON_CACHE_DIR / TORCHINDUCTOR_CACHE_DIR always win: we set
only the variables that are unset, at engine start, before anything compiles. Worker processes
(tensor parallelism) inherit them.

enforce_eager promises no graph capture and no compilation: the engine then sets MOPT_NO_COMPILE=1,
which layers/fusion.py reads on each call, so torch._inductor (seconds of import) is never loaded.
"""

from __future__ import annotations

import hashlib
import os
import re
from pathlib import Path
from typing import Any

CACHE_DIR_ENV = "MOPT_COMPILE_CACHE_DIR"
"""Root folder for the compile caches; one sub-folder per key is made beneath it."""
CACHE_VARIABLES = ("TRITON_CACHE_DIR", "TORCHINDUCTOR_CACHE_DIR")
NO_COMPILE_ENV = "MOPT_NO_COMPILE"

_set_no_compile = False
"""Whether this process set MOPT_NO_COMPILE itself (so a later engine without enforce_eager unsets it)."""


def cache_root() -> Path:
    if os.environ.get(CACHE_DIR_ENV):
        return Path(os.environ[CACHE_DIR_ENV]).expanduser()
    base = Path(os.environ["XDG_CACHE_HOME"]) if os.environ.get("XDG_CACHE_HOME") else Path.home() / ".cache"
    return base / "model-optimizer" / "compile"


def cache_key(gpu_name: str | None) -> str:
    """Readable and collision-free: the versions and GPU, cleaned for a folder name, plus a short hash of them."""
    from model_optimizer import __version__

    parts = [f"torch-{_version('torch')}", f"triton-{_version('triton')}", f"mopt-{__version__}"]
    parts.append(gpu_name or "cpu")
    raw = "_".join(parts)
    digest = hashlib.sha256(raw.encode()).hexdigest()[:8]
    return re.sub(r"[^A-Za-z0-9._-]+", "-", raw) + "-" + digest


def configure_compile(config: Any) -> dict[str, str]:
    """At engine start: point unset cache variables at our folder, and honour enforce_eager.

    Returns the variables this call set (empty when the user set both). On the CPU the key says
    "cpu": nothing compiles there unless Triton's interpreter runs, but the folders are the same."""
    _configure_no_compile(bool(getattr(config, "enforce_eager", False)))
    folder = cache_root() / cache_key(_gpu_name(getattr(config, "device", "auto")))
    chosen = {}
    for variable, sub in zip(CACHE_VARIABLES, ("triton", "inductor")):
        if not os.environ.get(variable):
            chosen[variable] = os.environ[variable] = str(folder / sub)
    return chosen


def _configure_no_compile(enforce_eager: bool) -> None:
    global _set_no_compile
    if enforce_eager and os.environ.get(NO_COMPILE_ENV) != "1":
        os.environ[NO_COMPILE_ENV] = "1"
        _set_no_compile = True
    elif not enforce_eager and _set_no_compile:
        os.environ.pop(NO_COMPILE_ENV, None)  # only what we set ourselves: a user's MOPT_NO_COMPILE stays
        _set_no_compile = False


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
