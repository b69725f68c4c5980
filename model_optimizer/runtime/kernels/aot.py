"""Compile our Triton kernels for a GPU architecture ahead of time, on a machine without that GPU.

A first engine start on a fresh machine spends ~10 s compiling Triton kernels (H200, Qwen3-0.6B).
Triton looks each kernel up in its disk cache (TRITON_CACHE_DIR) by a key of Triton's version, the
kernel's source (and that of every function it calls), the target (ptxas version and GPU arch), the
compile options and the specialization of the call (argument types, 16-byte alignment of pointers,
integers equal to 1 or divisible by 16). A cache holding exactly those entries makes the first start
compile nothing; any difference in the key (another Triton, an edited kernel, another GPU) is simply a
miss, compiled as before: stale entries are never used.

`compile_only(target)` produces those entries without the GPU: inside it every launch of a
`@triton.jit` kernel goes through Triton's own JIT (so the specialization and the key are Triton's,
not a copy of its rules) against a stand-in driver that reports the target GPU, and stops after
compiling (`warmup`). The engine's own code paths drive it (runner/aot_build.py runs the model's
forward passes on the meta device: shapes and strides without memory), so the kernels compiled are
the ones a start compiles. Where our Python picks a kernel variant from the device (is this tensor on
the GPU, its SM count, its compute capability, is a CUDA graph being captured) it asks here, and while
compiling for a target the answers are the target's.
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import os
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import torch


@dataclass(frozen=True)
class AotTarget:
    """The GPU the kernels are compiled for."""

    capability: tuple[int, int] = (9, 0)
    """Compute capability (9, 0): H100 and H200."""
    num_sms: int = 132
    """Streaming multiprocessors: kernel variants (split counts, tiles) depend on it. H200 and H100 SXM: 132."""
    name: str = "NVIDIA H200"
    """What torch reports as the device name: the tile table (quant_tiles.json) applies by name."""

    @property
    def arch(self) -> int:
        return self.capability[0] * 10 + self.capability[1]


PROGRESS_ENV = "MOPT_AOT_PROGRESS_FILE"
"""A file to which `compile_only` appends one byte per kernel variant it compiles (or finds in Triton's
cache), in whichever process compiles it: build workers inherit the variable, so `mopt compile-cache build`
follows compiles made in other processes by the file's size."""

logger = logging.getLogger(__name__)
_state = threading.local()


def building() -> AotTarget | None:
    """The target being compiled for (inside `compile_only`), else None."""
    return getattr(_state, "target", None)


def on_gpu(tensor: torch.Tensor) -> bool:
    """Whether `tensor` takes our GPU kernels: CUDA tensors, and meta tensors while compiling ahead of time."""
    return tensor.is_cuda or (tensor.device.type == "meta" and building() is not None)


def gpu_device(device: torch.device) -> bool:
    """`on_gpu` for a device."""
    return device.type == "cuda" or (device.type == "meta" and building() is not None)


def device_facts(device_index: int | None) -> tuple[str, int, tuple[int, int]]:
    """(name, SM count, compute capability) of the GPU, or of the target while compiling for it."""
    target = building()
    if target is not None:
        return target.name, target.num_sms, target.capability
    props = torch.cuda.get_device_properties(device_index or 0)
    return props.name, props.multi_processor_count, (props.major, props.minor)


def capturing() -> bool:
    """Whether a CUDA graph is being captured on the current stream (never while compiling ahead)."""
    if building() is not None or not torch.cuda.is_available():
        return False
    return torch.cuda.is_current_stream_capturing()


class _StandIn:
    """What Triton's JIT reads of a tensor argument to specialize a kernel: its dtype and its address
    (alignment). A meta tensor's address is its storage offset, its buffer's start being aligned as
    the CUDA caching allocator aligns every block (512 bytes)."""

    def __init__(self, tensor: torch.Tensor) -> None:
        self.dtype = tensor.dtype
        self._ptr = tensor.storage_offset() * tensor.element_size() + 512

    def data_ptr(self) -> int:
        return self._ptr


class _TargetDriver:
    """The parts of Triton's active driver its JIT asks before compiling: the target, a device, a stream."""

    def __init__(self, target: AotTarget) -> None:
        from triton.backends.compiler import GPUTarget

        self.target = GPUTarget("cuda", target.arch, 32)

    def get_current_target(self):
        return self.target

    def get_current_device(self) -> int:
        return 0

    def get_current_stream(self, device: int | None = None) -> int:
        return 0

    def is_active(self) -> bool:
        return True


@dataclass
class CompileLog:
    """What one `compile_only` block compiled: kernel name -> calls (cache hits included: Triton reads
    its disk cache inside the compile step, so a call here is an entry in the cache either way)."""

    calls: dict[str, int]
    compiled: int = 0
    """Distinct kernel variants this process compiled (or found in the disk cache)."""
    launchers: int = 0
    """Launcher modules it built beside them (_prebuild_launcher)."""

    @property
    def total(self) -> int:
        return sum(self.calls.values())


@contextlib.contextmanager
def compile_only(target: AotTarget = AotTarget(), claims: Path | None = None) -> Iterator[CompileLog]:
    """Every Triton kernel launch inside compiles for `target` into TRITON_CACHE_DIR and runs nothing.
    Arguments may be meta tensors. One block at a time per process (it swaps Triton's active driver).

    `claims`: a folder shared by several processes walking the same launches (a parallel build): each
    kernel variant is compiled by the first process to claim it there (a file created exclusively, named
    by a hash of the kernel and Triton's own key of the call), and left by the others. All walk in the
    same order, so each takes the next variant no one has taken: the compiles spread over the processes
    as over a queue."""
    from triton.runtime.driver import driver
    from triton.runtime.jit import JITFunction

    if building() is not None:
        raise RuntimeError("compile_only blocks do not nest")
    log = CompileLog({})
    original, original_compile = JITFunction.run, JITFunction._do_compile
    progress = os.environ.get(PROGRESS_ENV)

    def run(self, *args, grid, warmup, **kwargs):
        name = _name(self)
        log.calls[name] = log.calls.get(name, 0) + 1
        args = tuple(_StandIn(a) if isinstance(a, torch.Tensor) else a for a in args)
        kwargs = {k: _StandIn(v) if isinstance(v, torch.Tensor) else v for k, v in kwargs.items()}
        return original(self, *args, grid=grid, warmup=True, **kwargs)

    def do_compile(self, key, *args, **kwargs):
        if claims is not None and not _claim(claims, _variant(self, key)):
            return None  # Triton's JIT treats None as "nothing to launch" and keeps no entry
        log.compiled += 1
        kernel = original_compile(self, key, *args, **kwargs)
        log.launchers += _prebuild_launcher(kernel)
        if progress:
            _tick(progress)
        return kernel

    driver.set_active(_TargetDriver(target))
    JITFunction.run, JITFunction._do_compile = run, do_compile
    _state.target = target
    try:
        with _our_cache_manager():
            yield log
    finally:
        _state.target = None
        JITFunction.run, JITFunction._do_compile = original, original_compile
        driver.reset_active() if _has_default_driver(driver) else setattr(driver, "_active", None)


@contextlib.contextmanager
def _our_cache_manager() -> Iterator[None]:
    """Triton's cache read through compile_cache's manager for the block (unless the user named another):
    a build into a folder that was moved or copied, or holds a damaged entry, finds what is there by name
    and compiles only what is missing or damaged, as the engine that reads the folder does."""
    from model_optimizer.runtime.kernels.compile_cache import MANAGER, TRITON_MANAGER_ENV

    previous = os.environ.get(TRITON_MANAGER_ENV)
    if previous:
        yield
        return
    os.environ[TRITON_MANAGER_ENV] = MANAGER
    try:
        yield
    finally:
        os.environ.pop(TRITON_MANAGER_ENV, None)


def count_variants(build: Callable[[], object]) -> int:
    """The kernel variants `build` (aot_build.build: a walk inside `compile_only`) compiles, counted without
    compiling any: Triton's compile step, which compile_only calls for each variant it takes, is replaced
    for the call by one that notes the variant and hands back nothing, as for a variant another worker
    claimed. A walk is seconds where the compiles are tens of seconds: it gives a build's progress its total."""
    from triton.runtime.jit import JITFunction

    variants: set[str] = set()
    original = JITFunction._do_compile

    def note(self, key, *args, **kwargs):
        variants.add(_variant(self, key))
        return None

    JITFunction._do_compile = note
    try:
        build()
    finally:
        JITFunction._do_compile = original
    return len(variants)


def _variant(fn, key) -> str:
    """A kernel variant as the build's workers claim it: the kernel and Triton's key of the call."""
    return f"{fn.module}.{_name(fn)}|{key}"


def _tick(path: str) -> None:
    with open(path, "ab") as file:  # one byte with O_APPEND: lands whole, whichever worker writes it
        file.write(b".")


def _name(fn) -> str:
    return getattr(fn, "__name__", None) or getattr(fn.fn, "__name__", "kernel")


def _prebuild_launcher(kernel) -> int:
    """Build the kernel's launcher module into the cache as its first load would; 1 if built (or found).

    Triton 3.6's CUDA backend compiles a small C launcher per kernel signature with the host's C
    compiler when a kernel first loads (seconds over a start's few dozen kernels); built here, in the
    same cache folder, that is a hit. It links against libcuda, so it is built only where the NVIDIA
    driver is installed (a GPU host: compile_ahead's workers); later Tritons launch every kernel
    through one generic launcher and have nothing to build."""
    try:
        from triton.backends.nvidia.driver import CudaLauncher

        if "make_launcher" not in CudaLauncher.__init__.__code__.co_names:  # the generic launcher
            return 0
        CudaLauncher(kernel.src, kernel.metadata)
    except Exception as exc:  # noqa: BLE001 - no libcuda or no compiler here: the first load builds it
        logger.debug("launcher of %s not built ahead: %s", getattr(kernel, "name", "?"), exc)
        return 0
    return 1


def _claim(claims: Path, what: str) -> bool:
    """Whether this process is the first to claim `what` in the shared folder."""
    path = claims / hashlib.sha256(what.encode()).hexdigest()[:32]
    try:
        os.close(os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY))
    except FileExistsError:
        return False
    return True


def _has_default_driver(driver) -> bool:
    """Whether Triton can make its own driver here (a GPU machine); without one the active slot is cleared."""
    try:
        driver.default  # noqa: B018  (property: creates the driver)
    except RuntimeError:
        return False
    return True
