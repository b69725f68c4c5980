"""Registered host memory: page-aligned buffers, page-locked with cudaHostRegister, and copies between
them and the device that a CUDA graph can capture (weight offload, the host KV tier).

torch refuses a CPU -> CUDA `copy_` inside a graph capture unless its own pinned allocator made the
source (it does not count registered memory as pinned), and that allocator rounds each allocation up
to a power of two. The CUDA runtime has no such rule: `cudaMemcpyAsync` from registered memory is an
async copy and becomes a memcpy node when the stream is capturing. So the copy goes to the runtime
torch itself loaded (found in this process's mappings), on torch's stream handle.
"""

from __future__ import annotations

import ctypes
import functools
import weakref

import torch

PAGE = 4096
"""Buffers start on a page of their own: page-locking one never touches another allocation's page."""
_HOST_TO_DEVICE = 1  # cudaMemcpyHostToDevice
_DEVICE_TO_HOST = 2  # cudaMemcpyDeviceToHost


@functools.cache
def _cudart() -> ctypes.CDLL:
    """The libcudart torch loaded (the same runtime, hence the same context and streams)."""
    torch.cuda.init()
    with open("/proc/self/maps") as maps:
        paths = {line.split()[-1] for line in maps if "libcudart" in line and "/" in line}
    for path in sorted(paths):
        lib = ctypes.CDLL(path)
        if hasattr(lib, "cudaMemcpyAsync"):
            lib.cudaMemcpyAsync.argtypes = [
                ctypes.c_void_p,
                ctypes.c_void_p,
                ctypes.c_size_t,
                ctypes.c_int,
                ctypes.c_void_p,
            ]
            lib.cudaMemcpyAsync.restype = ctypes.c_int
            return lib
    raise RuntimeError("host offload needs the CUDA runtime library torch loaded (libcudart), found none mapped")


def copy_host_to_device(dst: torch.Tensor, src: torch.Tensor, stream: torch.cuda.Stream) -> None:
    """Queue dst <- src (same byte count, both contiguous; src in registered host memory) on `stream`."""
    _copy(dst, src, _HOST_TO_DEVICE, stream)


def copy_device_to_host(dst: torch.Tensor, src: torch.Tensor, stream: torch.cuda.Stream) -> None:
    """Queue dst <- src (same byte count, both contiguous; dst in registered host memory) on `stream`."""
    _copy(dst, src, _DEVICE_TO_HOST, stream)


def _copy(dst: torch.Tensor, src: torch.Tensor, kind: int, stream: torch.cuda.Stream) -> None:
    nbytes = src.numel() * src.element_size()
    if dst.numel() * dst.element_size() != nbytes or not (dst.is_contiguous() and src.is_contiguous()):
        raise ValueError(f"copy of {nbytes} contiguous bytes into {dst.numel() * dst.element_size()}")
    err = _cudart().cudaMemcpyAsync(dst.data_ptr(), src.data_ptr(), nbytes, kind, stream.cuda_stream)
    if err != 0:
        raise RuntimeError(f"cudaMemcpyAsync of {nbytes} bytes failed (CUDA error {err})")


def host_buffer(nbytes: int) -> torch.Tensor:
    """A uint8 CPU tensor of `nbytes` (a multiple of PAGE) starting on a page boundary: page-locking it
    covers only pages of its own, never one shared with another allocation (registered twice: an error)."""
    raw = torch.empty(nbytes + PAGE, dtype=torch.uint8)
    start = -raw.data_ptr() % PAGE
    return raw[start : start + nbytes]


def page_lock(owner: object, buffer: torch.Tensor, setting: str) -> None:
    """cudaHostRegister the host buffer for the owner's lifetime (async, capturable copies). A host that cannot
    lock it is a ValueError naming `setting`, the engine setting that asked for the memory."""
    err = int(torch.cuda.cudart().cudaHostRegister(buffer.data_ptr(), buffer.numel(), 0))
    if err != 0:
        _cudart().cudaGetLastError()  # the failure is also CUDA's last error: the next kernel launch would raise it
        raise ValueError(
            f"{setting}: cudaHostRegister of {buffer.numel() / 2**30:.2f} GiB of host memory failed (CUDA error "
            f"{err}): the host cannot lock that much (ulimit -l, or too little RAM); lower {setting}"
        )
    weakref.finalize(owner, _unlock, buffer)  # the finalizer holds the buffer: unregistered, then freed


def _unlock(buffer: torch.Tensor) -> None:
    torch.cuda.cudart().cudaHostUnregister(buffer.data_ptr())
