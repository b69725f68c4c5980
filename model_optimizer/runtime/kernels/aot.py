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
import threading
from collections.abc import Iterator
from dataclasses import dataclass

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

    @property
    def total(self) -> int:
        return sum(self.calls.values())


@contextlib.contextmanager
def compile_only(target: AotTarget = AotTarget()) -> Iterator[CompileLog]:
    """Every Triton kernel launch inside compiles for `target` into TRITON_CACHE_DIR and runs nothing.
    Arguments may be meta tensors. One block at a time per process (it swaps Triton's active driver)."""
    from triton.runtime.driver import driver
    from triton.runtime.jit import JITFunction

    if building() is not None:
        raise RuntimeError("compile_only blocks do not nest")
    log = CompileLog({})
    original = JITFunction.run

    def run(self, *args, grid, warmup, **kwargs):
        name = getattr(self, "__name__", None) or getattr(self.fn, "__name__", "kernel")
        log.calls[name] = log.calls.get(name, 0) + 1
        args = tuple(_StandIn(a) if isinstance(a, torch.Tensor) else a for a in args)
        kwargs = {k: _StandIn(v) if isinstance(v, torch.Tensor) else v for k, v in kwargs.items()}
        return original(self, *args, grid=grid, warmup=True, **kwargs)

    driver.set_active(_TargetDriver(target))
    JITFunction.run = run
    _state.target = target
    try:
        yield log
    finally:
        _state.target = None
        JITFunction.run = original
        driver.reset_active() if _has_default_driver(driver) else setattr(driver, "_active", None)


def _has_default_driver(driver) -> bool:
    """Whether Triton can make its own driver here (a GPU machine); without one the active slot is cleared."""
    try:
        driver.default  # noqa: B018  (property: creates the driver)
    except RuntimeError:
        return False
    return True
