"""MaskStaging: host memory the engine core fills with a step's grammar masks, and their copy to the device.

The core asks for buffers (`buffers`), llguidance writes the masks straight into them, and `upload`
queues one host-to-device copy of the mask index and the bitmask together. On CUDA the buffers are
pinned, so the copy is asynchronous (from pageable memory it would wait for the forward queued before
it, and the mask exists precisely to be ready before that forward ends). Two buffers alternate: the
one being filled is never the source of a copy still queued on the device.
"""

from __future__ import annotations

import numpy as np
import torch

from model_optimizer.runtime.layers.token_mask import TokenMask
from model_optimizer.runtime.structured.manager import HostTokenMask


def _aligned(num_bytes: int) -> int:
    return -(-num_bytes // 16) * 16


class MaskStaging:
    def __init__(self, device: torch.device) -> None:
        self.device = device
        self._pinned = device.type == "cuda"
        self._host: list[torch.Tensor | None] = [None, None]
        self._parity = 0
        self._device_buffer: torch.Tensor | None = None
        self._layout: tuple[torch.Tensor, int, int, int, int] | None = None
        """Of the buffers last handed out: (host tensor, rows, masked, words, index bytes)."""

    def buffers(self, num_rows: int, num_masked: int, words: int) -> HostTokenMask:
        """Empty mask arrays for one step, laid out as `upload` copies them."""
        index_bytes = _aligned(num_rows * 4)
        need = index_bytes + num_masked * words * 4
        self._parity ^= 1
        host = self._host[self._parity]
        if host is None or host.numel() < need:
            host = torch.empty(max(need, 2 * (host.numel() if host is not None else 0)), dtype=torch.uint8)
            host = host.pin_memory() if self._pinned else host
            self._host[self._parity] = host
        self._layout = (host, num_rows, num_masked, words, index_bytes)
        array = host.numpy()
        return HostTokenMask(
            array[: num_rows * 4].view(np.int32), array[index_bytes:need].view(np.int32).reshape(num_masked, words)
        )

    def upload(self, mask: HostTokenMask) -> TokenMask:
        """The masks on the device (one copy queued, no wait); from any host arrays, fastest from `buffers`'."""
        layout = self._layout
        self._layout = None
        if layout is None or mask.bitmask.ctypes.data != layout[0].data_ptr() + layout[4]:
            return TokenMask(  # arrays of its own (a test's): copied as they are
                torch.from_numpy(np.ascontiguousarray(mask.bitmask)).to(self.device),
                torch.from_numpy(np.ascontiguousarray(mask.mask_index)).to(self.device),
            )
        host, num_rows, num_masked, words, index_bytes = layout
        need = index_bytes + num_masked * words * 4
        if self.device.type == "cpu":
            staged = host[:need]  # the host memory is the device's: nothing to copy
        else:
            if self._device_buffer is None or self._device_buffer.numel() < need:
                self._device_buffer = torch.empty(host.numel(), dtype=torch.uint8, device=self.device)
            staged = self._device_buffer[:need]
            staged.copy_(host[:need], non_blocking=self._pinned)
        index = staged[: num_rows * 4].view(torch.int32)
        bitmask = staged[index_bytes:need].view(torch.int32).view(num_masked, words)
        return TokenMask(bitmask, index)
