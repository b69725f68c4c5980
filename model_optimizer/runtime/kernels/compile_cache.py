"""Triton's compiled-kernel cache in a folder we own, keyed by versions and GPU.

Our kernels (attention, rotary, the fused element-wise ops, sampling) are Triton kernels compiled
at start-up: most of a cold start on a GPU (README "Start-up"). Triton caches its output on disk,
but in a folder it names itself (~/.triton/cache, one folder for every Triton version and GPU).
We point it at

    <root>/<key>/triton   root: $MOPT_COMPILE_CACHE_DIR, else $XDG_CACHE_HOME/model-optimizer/compile,
                          else ~/.cache/model-optimizer/compile
                          key: torch, Triton and model_optimizer versions and the GPU's architecture
                          (sm90: H100 and H200 run the same binaries)

so a second start reads what the first compiled, and a new version (or another architecture) never
reads a stale entry: inside the folder Triton keys each entry by its own version, the kernel's
source, the target and the call's specialization, so an edited kernel is a miss, compiled anew.
`mopt compile-cache build` (runner/aot_build.py) fills the folder of an architecture ahead of time
on any machine, so a container image can ship it. A user's own TRITON_CACHE_DIR always wins: we set
it only where it is unset, at engine start, before anything compiles. Worker processes (tensor
parallelism) inherit it.

Before its first kernel, Triton computes its installation key (`triton_key()`: SHA-256 over its sources
and its whole shared library), part of every cache lookup. The engine core and
the tensor-parallel workers hash it in a thread as their first act
(`hash_triton_in_background`; `LLM` once its config says CUDA), beside the torch import and the
weights' load (file reads and hashing release the GIL), and the model runner waits for it before its
first forward (`wait_for_triton_key`), so that no start computes it twice. Started after the torch
import instead, it measured slower (README "Start-up").

Nothing in the engine uses torch.compile (layers/fusion.py runs our own kernels), so there is no
inductor cache to place and enforce_eager changes nothing here: it only turns CUDA graphs off.
"""

from __future__ import annotations

import hashlib
import importlib
import os
import re
import threading
from pathlib import Path
from typing import Any

from model_optimizer.runtime.cuda_context import load_driver

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


def cache_key(arch: str | None) -> str:
    """Readable and collision-free: the versions and the GPU architecture ("sm90"), cleaned for a folder
    name, plus a short hash of them."""
    from model_optimizer.common.version import __version__

    parts = [f"torch-{_version('torch')}", f"triton-{_version('triton')}", f"mopt-{__version__}"]
    parts.append(arch or "cpu")
    raw = "_".join(parts)
    digest = hashlib.sha256(raw.encode()).hexdigest()[:8]
    return re.sub(r"[^A-Za-z0-9._-]+", "-", raw) + "-" + digest


def configure_compile(config: Any) -> dict[str, str]:
    """At engine start: point an unset TRITON_CACHE_DIR at our folder.

    Returns the variables this call set (empty when the user set them). On the CPU the key says
    "cpu": nothing compiles there unless Triton's interpreter runs, but the folder is the same."""
    if os.environ.get(TRITON_CACHE_ENV):
        return {}
    folder = cache_folder(_gpu_arch(getattr(config, "device", "auto")))
    os.environ[TRITON_CACHE_ENV] = str(folder)
    return {TRITON_CACHE_ENV: str(folder)}


def cache_folder(arch: str | None) -> Path:
    """Triton's cache folder for an architecture ("sm90"; None: the CPU) under the current root."""
    return cache_root() / cache_key(arch) / "triton"


def _gpu_arch(device: str) -> str | None:
    """The CUDA device's architecture, "sm90", None on the CPU (asked only when the engine will use CUDA)."""
    if device == "cpu":
        return None
    import torch

    if not torch.cuda.is_available():
        return None
    major, minor = torch.cuda.get_device_capability(torch.cuda.current_device())
    return f"sm{major}{minor}"


def _version(package: str) -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(package)
    except PackageNotFoundError:
        return "none"


_key_thread: threading.Thread | None = None
"""The latest key thread of this process (wait_for_triton_key joins it)."""


def hash_triton_in_background(need_gpu: bool = True) -> threading.Thread | None:
    """Start Triton's installation key (`triton_key()`, cached by Triton for the process) in a daemon
    thread; None under Triton's interpreter, which compiles nothing. With `need_gpu` the thread first
    loads the CUDA driver's library and stops where there is none (a CPU machine compiles nothing
    either). A failure is left for Triton to raise where it needs the key."""
    global _key_thread
    if os.environ.get("TRITON_INTERPRET") == "1":
        return None
    _key_thread = threading.Thread(target=_triton_key, args=(need_gpu,), name="mopt-triton-key", daemon=True)
    _key_thread.start()
    return _key_thread


def wait_for_triton_key(timeout: float = 60.0) -> None:
    """Before the first kernel: let the thread finish the key rather than computing it a second time."""
    if _key_thread is not None:
        _key_thread.join(timeout)


def _triton_key(need_gpu: bool) -> str | None:
    if need_gpu and load_driver() is None:
        return None
    for module in ("triton.runtime.cache", "triton.compiler.compiler"):  # where Triton 3.x keeps it
        try:
            key = getattr(importlib.import_module(module), "triton_key", None)
        except ImportError:
            continue
        if key is None:
            continue
        try:
            return key()
        except Exception:  # noqa: BLE001 - a broken Triton: the engine reports it where it needs the key
            return None
    return None
