"""MaskStaging: host memory the engine core fills with a step's grammar masks, and their copy to the device.

The core asks for buffers (`buffers`), llguidance writes the masks straight into them, and `upload`
queues one host-to-device copy of the mask index and the bitmask together. On CUDA the buffers are
pinned, so the copy is asynchronous (from pageable memory it would wait for the forward queued before
it, and the mask exists precisely to be ready before that forward ends). Two buffers alternate: the
one being filled is never the source of a copy still queued on the device.

Both calls sit on the chain of a constrained step that no forward hides (tokens -> masks -> sampling),
and a decode batch keeps its shape from step to step: each buffer keeps the arrays and tensor views of
its last layout, so a step with the same shape builds none (the slicing and viewing cost more host
time than the copy's launch).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from model_optimizer.runtime.layers.token_mask import TokenMask
from model_optimizer.runtime.structured.manager import HostTokenMask


def _aligned(num_bytes: int) -> int:
    return -(-num_bytes // 16) * 16


@dataclass(frozen=True)
class _Layout:
    """One buffer's arrays for one shape (rows, masked, words), and the tensors `upload` copies and returns."""

    shape: tuple[int, int, int]
    host: HostTokenMask
    """The arrays handed out, views of the buffer: index first, the bitmask 16-byte aligned after it."""
    source: torch.Tensor
    """The bytes of both, on the host: what the copy reads."""
    staged: torch.Tensor
    """Where the copy writes (the device buffer; the host bytes themselves on the CPU)."""
    device: TokenMask
    """Views of `staged`: the masks the sampler reads."""


class MaskStaging:
    def __init__(self, device: torch.device) -> None:
        self.device = device
        self._pinned = device.type == "cuda"
        self._host: list[torch.Tensor | None] = [None, None]
        self._parity = 0
        self._device_buffer: torch.Tensor | None = None
        self._layouts: list[_Layout | None] = [None, None]
        """Per buffer, the layout it last handed out (kept while its shape and memory are unchanged)."""
        self._handed: _Layout | None = None
        """The layout of the buffers last handed out, until `upload` takes it."""

    def buffers(self, num_rows: int, num_masked: int, words: int) -> HostTokenMask:
        """Empty mask arrays for one step, laid out as `upload` copies them."""
        self._parity ^= 1
        layout = self._layouts[self._parity]
        if layout is None or layout.shape != (num_rows, num_masked, words):
            layout = self._layout(num_rows, num_masked, words)
            self._layouts[self._parity] = layout
        self._handed = layout
        return layout.host

    def _layout(self, num_rows: int, num_masked: int, words: int) -> _Layout:
        """The arrays and views of one shape in the current buffer, grown if too small (the device buffer too:
        then the other buffer's layout, whose views are of the old one, is dropped)."""
        index_bytes = _aligned(num_rows * 4)
        need = index_bytes + num_masked * words * 4
        host = self._host[self._parity]
        if host is None or host.numel() < need:
            host = torch.empty(max(need, 2 * (host.numel() if host is not None else 0)), dtype=torch.uint8)
            host = host.pin_memory() if self._pinned else host
            self._host[self._parity] = host
        source = host[:need]
        if self.device.type == "cpu":
            staged = source  # the host memory is the device's: nothing to copy
        else:
            if self._device_buffer is None or self._device_buffer.numel() < need:
                self._device_buffer = torch.empty(host.numel(), dtype=torch.uint8, device=self.device)
                self._layouts = [None, None]  # their device views are of the old buffer
            staged = self._device_buffer[:need]
        array = host.numpy()
        arrays = HostTokenMask(
            array[: num_rows * 4].view(np.int32), array[index_bytes:need].view(np.int32).reshape(num_masked, words)
        )
        index = staged[: num_rows * 4].view(torch.int32)
        bitmask = staged[index_bytes:need].view(torch.int32).view(num_masked, words)
        return _Layout((num_rows, num_masked, words), arrays, source, staged, TokenMask(bitmask, index))

    def upload(self, mask: HostTokenMask) -> TokenMask:
        """The masks on the device (one copy queued, no wait); from any host arrays, fastest from `buffers`'."""
        layout, self._handed = self._handed, None
        if layout is None or mask.bitmask is not layout.host.bitmask or mask.mask_index is not layout.host.mask_index:
            return TokenMask(  # arrays of its own (a test's): copied as they are
                torch.from_numpy(np.ascontiguousarray(mask.bitmask)).to(self.device),
                torch.from_numpy(np.ascontiguousarray(mask.mask_index)).to(self.device),
            )
        if layout.staged is not layout.source:
            layout.staged.copy_(layout.source, non_blocking=self._pinned)
        return layout.device
