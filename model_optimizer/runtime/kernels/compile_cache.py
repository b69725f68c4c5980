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
on any machine, so a container image can ship it. A user's own TRITON_CACHE_DIR or TRITON_HOME always
wins: we set TRITON_CACHE_DIR only where neither is set, at engine start, before anything compiles, and a
later start (another device) re-points only a value we set ourselves (MOPT_TRITON_CACHE_DIR_SET names
it). Worker processes (tensor parallelism) inherit it. The roots are made absolute, so the folder does not
depend on the working directory; the key names torch by its public version ("2.13.0", not "2.13.0+cpu"):
Triton's entries do not depend on torch's build, and a cache built with a CPU-only torch serves a GPU host.

Beside the folder we install our own cache manager (TRITON_CACHE_MANAGER, `RelocatableCacheManager`).
Triton's FileCacheManager records each entry's files by their absolute build-time paths (the
`__grp__*.json` index): a folder moved or copied into an image was a miss for every kernel (or, with the
original still there, silently read the original's files). Ours finds each listed file by its name in
the entry's own folder, and takes an entry whose index or metadata does not load (a truncated file) as a
miss, compiled anew. A folder the process cannot write (a read-only image) is still read, through the
same manager (MOPT_TRITON_READ_DIRS), while misses compile into a writable per-user folder under the
default root (one warning), instead of failing the start with PermissionError.

Before its first kernel, Triton computes its installation key (`triton_key()`: SHA-256 over its sources
and its whole shared library), part of every cache lookup. The engine core and
the tensor-parallel workers hash it in a thread as their first act
(`hash_triton_in_background`; `LLM` once its config says CUDA), beside the torch import and the
weights' load (file reads and hashing release the GIL), and the model runner waits for it before its
first forward (`wait_for_triton_key`), so that no start computes it twice. Started after the torch
import instead, it measured slower (README "Start-up"). Triton itself is imported by the caller, before
the thread starts (~0.13 s): imported in the thread, it raced the main thread's first import of a Triton
submodule (`from triton.runtime.jit import ...` while the thread was inside `triton/__init__`), which
failed with Python's `_DeadlockError`, `KeyError: 'triton'` or hung; the thread now only reads and hashes.

Each entry's index written through our manager also records its files' sizes; a lookup compares them
(one stat per file, as the existence check already cost): a file cut short by an interrupted copy (a
truncated `.cubin` would fail the first launch) is a miss, compiled anew, with a warning.

Nothing in the engine uses torch.compile (layers/fusion.py runs our own kernels), so there is no
inductor cache to place and enforce_eager changes nothing here: it only turns CUDA graphs off.
"""

from __future__ import annotations

import hashlib
import importlib
import json
import logging
import os
import re
import tempfile
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

from model_optimizer.runtime.cuda_context import load_driver

log = logging.getLogger(__name__)

CACHE_DIR_ENV = "MOPT_COMPILE_CACHE_DIR"
"""Root folder for the compile caches; one sub-folder per key is made beneath it."""
TRITON_CACHE_ENV = "TRITON_CACHE_DIR"
"""Triton's own variable for its cache folder: we set it where the user has not."""
TRITON_HOME_ENV = "TRITON_HOME"
"""Triton's home (its cache in $TRITON_HOME/.triton/cache): set by the user, we leave the cache to it."""
TRITON_MANAGER_ENV = "TRITON_CACHE_MANAGER"
"""Triton's cache-manager class ("module:Class"): ours, set beside the folder, unless the user set one."""
MANAGER = f"{__name__}:RelocatableCacheManager"
READ_DIRS_ENV = "MOPT_TRITON_READ_DIRS"
"""Folders (os.pathsep-separated) our manager reads after TRITON_CACHE_DIR: a shipped folder this process
cannot write, while its misses compile into TRITON_CACHE_DIR."""
OWNED_ENV = "MOPT_TRITON_CACHE_DIR_SET"
"""The TRITON_CACHE_DIR configure_compile set (child processes inherit it): equal to it, the variable is
ours to re-point; any other value is the user's."""
CACHE_VARIABLES = (TRITON_CACHE_ENV, TRITON_MANAGER_ENV, READ_DIRS_ENV, OWNED_ENV)
"""Every cache variable configure_compile may set (tests clear them to start clean)."""


def cache_root() -> Path:
    """The root the key folders are made in, absolute (a relative variable is taken from the working
    directory now: a later chdir does not move the cache)."""
    if os.environ.get(CACHE_DIR_ENV):
        return absolute_path(Path(os.environ[CACHE_DIR_ENV]))
    return default_root()


def default_root() -> Path:
    """$XDG_CACHE_HOME/model-optimizer/compile, else ~/.cache/model-optimizer/compile (MOPT_COMPILE_CACHE_DIR
    aside): where a read-only root's misses compile."""
    base = Path(os.environ["XDG_CACHE_HOME"]) if os.environ.get("XDG_CACHE_HOME") else Path.home() / ".cache"
    return absolute_path(base / "model-optimizer" / "compile")


def absolute_path(path: Path) -> Path:
    """`path` with ~ expanded, made absolute from the working directory now (no symlink resolved)."""
    return Path(os.path.abspath(path.expanduser()))


def cache_key(arch: str | None) -> str:
    """Readable and collision-free: the versions and the GPU architecture ("sm90"), cleaned for a folder
    name, plus a short hash of them. torch is named by its public version: its local build tag ("+cpu",
    "+cu128") changes no Triton entry (Triton keys those by its own version, the source and the target),
    and a cache built with a CPU-only torch must be the folder a CUDA torch of that version reads."""
    from model_optimizer.common.version import __version__

    torch_version = _version("torch").split("+", 1)[0]
    parts = [f"torch-{torch_version}", f"triton-{_version('triton')}", f"mopt-{__version__}"]
    parts.append(arch or "cpu")
    raw = "_".join(parts)
    digest = hashlib.sha256(raw.encode()).hexdigest()[:8]
    return re.sub(r"[^A-Za-z0-9._-]+", "-", raw) + "-" + digest


def configure_compile(config: Any) -> dict[str, str]:
    """At engine start: point TRITON_CACHE_DIR at our folder for this device, with our cache manager.

    Returns the variables this call set; empty when the user chose the cache (TRITON_CACHE_DIR other
    than one we set, or TRITON_HOME). A later call (another engine, another device) re-points a folder
    we set. A folder this process cannot write is read through the manager while misses compile into
    a writable folder (`_writable_fallback`). On the CPU the key says "cpu": nothing compiles there
    unless Triton's interpreter runs, but the folder is the same."""
    ours = os.environ.get(TRITON_CACHE_ENV) in (None, "", os.environ.get(OWNED_ENV))
    if not ours or os.environ.get(TRITON_HOME_ENV):
        if ours:  # TRITON_HOME set since we set the folder: the user's choice wins
            _unset_ours()
        return {}
    folder = cache_folder(_gpu_arch(getattr(config, "device", "auto")))
    chosen = {TRITON_CACHE_ENV: str(folder)}
    if not _writable(folder):
        fallback = _writable_fallback(folder.parent.name)
        _warn_once(folder, fallback)
        chosen = {TRITON_CACHE_ENV: str(fallback), READ_DIRS_ENV: str(folder)}
    if os.environ.get(TRITON_MANAGER_ENV) in (None, "", MANAGER):
        chosen[TRITON_MANAGER_ENV] = MANAGER
    chosen[OWNED_ENV] = chosen[TRITON_CACHE_ENV]
    if READ_DIRS_ENV not in chosen:
        os.environ.pop(READ_DIRS_ENV, None)  # an earlier call's read-only folder
    os.environ.update(chosen)
    return chosen


def _unset_ours() -> None:
    for name in (TRITON_CACHE_ENV, READ_DIRS_ENV, OWNED_ENV):
        os.environ.pop(name, None)
    if os.environ.get(TRITON_MANAGER_ENV) == MANAGER:
        os.environ.pop(TRITON_MANAGER_ENV)


def cache_folder(arch: str | None) -> Path:
    """Triton's cache folder for an architecture ("sm90"; None: the CPU) under the current root."""
    return cache_root() / cache_key(arch) / "triton"


def _writable(folder: Path) -> bool:
    """Whether Triton can make its entries in `folder`: the folder, or the nearest part of its path that
    exists, is a folder this process may write to."""
    for path in (folder, *folder.parents):
        if path.exists():
            return path.is_dir() and os.access(path, os.W_OK | os.X_OK)
    return False


def _writable_fallback(key: str) -> Path:
    """Where misses compile when the cache folder is read-only: the key's folder under the default root,
    else under a per-user folder in the temporary folder."""
    for root in (default_root(), Path(tempfile.gettempdir()) / f"model-optimizer-{os.getuid()}" / "compile"):
        folder = root / key / "triton"
        if _writable(folder):
            return folder
    return folder


_warned: set[Path] = set()


def _warn_once(folder: Path, fallback: Path) -> None:
    if folder not in _warned:
        _warned.add(folder)
        log.warning(
            "compile cache %s is not writable: its kernels are read, and kernels it lacks are compiled into %s",
            folder,
            fallback,
        )


def _read_dirs() -> list[str]:
    return [d for d in os.environ.get(READ_DIRS_ENV, "").split(os.pathsep) if d]


def _read_group(folder: str, filename: str) -> dict[str, str] | None:
    """The files of an entry, from its index `__grp__<filename>` in `folder`, each found by its name in
    `folder` (the index holds the paths where it was built); None, a miss, when the index or a file is
    missing, empty, of another size than the index records (a truncated copy) or does not load: the
    compile then writes the entry anew."""
    index = os.path.join(folder, f"__grp__{filename}")
    if not os.path.isfile(index):
        return None
    try:
        with open(index) as file:
            recorded = json.load(file)
        children, sizes = recorded["child_paths"], recorded.get("sizes") or {}
        group = {}
        for name, stored in children.items():
            path = os.path.join(folder, os.path.basename(stored or name))
            size = os.path.getsize(path)  # OSError: the file is missing
            if size == 0 or size != sizes.get(name, size):
                raise ValueError(f"{os.path.basename(path)} has {size} bytes, {sizes.get(name, 'more')} expected")
            if path.endswith(".json"):  # Triton parses the metadata on load: a damaged one is a miss here
                with open(path) as file:
                    json.load(file)
            group[name] = path
    except (OSError, ValueError, TypeError, KeyError, AttributeError) as exc:
        log.warning("compile cache entry %s is damaged (%s): compiling it anew", folder, exc)
        return None
    return group if filename in group else None


def _index_with_sizes(group: dict[str, str]) -> str:
    """The index of an entry as Triton writes it, plus each file's size for `_read_group` to check."""
    return json.dumps({"child_paths": group, "sizes": {name: os.path.getsize(path) for name, path in group.items()}})


_MANAGER_CLASS: type | None = None


def _manager_class() -> type:
    """RelocatableCacheManager, made on first use: importing Triton here would slow every import of this
    module, which the engine loads before torch."""
    global _MANAGER_CLASS
    if _MANAGER_CLASS is None:
        from triton.runtime.cache import FileCacheManager

        class RelocatableCacheManager(FileCacheManager):
            """Triton's FileCacheManager (Triton 3.6 on: the same constructor and methods) with entries
            found where they lie: an entry's files by their names in its own folder, a damaged or
            truncated entry a miss (its index records the files' sizes), and the folders of
            MOPT_TRITON_READ_DIRS read after TRITON_CACHE_DIR (written: never)."""

            def __init__(self, key, override=False, dump=False):
                super().__init__(key, override=override, dump=dump)
                plain = not override and not dump
                self.read_dirs = [os.path.join(d, key) for d in _read_dirs()] if plain else []

            def get_file(self, filename):
                found = super().get_file(filename)
                if found is None:
                    found = next((p for d in self.read_dirs if os.path.isfile(p := os.path.join(d, filename))), None)
                return found

            def get_group(self, filename):
                for folder in (self.cache_dir, *self.read_dirs):
                    group = _read_group(folder, filename)
                    if group is not None:
                        return group
                return None

            def put_group(self, filename, group):
                return self.put(_index_with_sizes(group), f"__grp__{filename}", binary=False)

        RelocatableCacheManager.__module__ = __name__
        _MANAGER_CLASS = RelocatableCacheManager
    return _MANAGER_CLASS


def __getattr__(name: str) -> Any:
    """`RelocatableCacheManager`, as Triton imports it from TRITON_CACHE_MANAGER (module:Class)."""
    if name == "RelocatableCacheManager":
        return _manager_class()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


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
    thread; None under Triton's interpreter, which compiles nothing. With `need_gpu`, None where the CUDA
    driver's library does not load (a CPU machine compiles nothing either). Triton is imported here, in
    the caller's thread: the thread imports nothing, so it cannot race another thread's imports of Triton
    (module docstring). A failure is left for Triton to raise where it needs the key."""
    global _key_thread
    if os.environ.get("TRITON_INTERPRET") == "1":
        return None
    if need_gpu and load_driver() is None:
        return None
    key = _import_triton_key()
    if key is None:
        return None
    _key_thread = threading.Thread(target=_compute, args=(key,), name="mopt-triton-key", daemon=True)
    _key_thread.start()
    return _key_thread


def wait_for_triton_key(timeout: float = 60.0) -> None:
    """Before the first kernel: let the thread finish the key rather than computing it a second time."""
    if _key_thread is not None:
        _key_thread.join(timeout)


def _import_triton_key() -> Callable[[], str] | None:
    """Triton's `triton_key`, with every module it imports while it runs already imported (it walks
    Triton's compiler and backend packages: `import triton` has loaded them), or None."""
    for module in ("triton.runtime.cache", "triton.compiler.compiler"):  # where Triton 3.x keeps it
        try:
            key = getattr(importlib.import_module(module), "triton_key", None)
        except ImportError:
            continue
        except Exception:  # noqa: BLE001 - a broken Triton: the engine reports it where it imports Triton
            return None
        if key is not None:
            return key
    return None


def _compute(key: Callable[[], str]) -> str | None:
    try:
        return key()
    except Exception:  # noqa: BLE001 - a broken Triton: the engine reports it where it needs the key
        return None
