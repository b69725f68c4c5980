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

For the decode graphs' masked draw (runner/decode_runner.py), whose graph reads the masks at fixed
addresses, a step of up to `max_rows` rows is laid out the same way whatever its shape: the row index
takes `max_rows` entries, the bitmask starts after them, and the device buffer is made once for
`max_rows` masked rows. `fixed(size)` gives those views for a bucket of `size` padded rows: the index
entries past a step's rows hold -1 or an earlier step's index below `max_rows` (the host arrays start
at -1, and a buffer that held a wider step, whose indices may reach past `max_rows`, is reset to -1
before it holds a fixed one again), so a padded row reads a valid bitmask row and its draw is unused.
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
    def __init__(self, device: torch.device, max_rows: int = 0) -> None:
        """`max_rows`: the most sampling rows of a step the fixed layout holds (0: none, every shape its own)."""
        self.device = device
        self.max_rows = max_rows
        self._index_bytes = _aligned(max_rows * 4)
        """Bytes of the row index in the fixed layout: the bitmask starts here."""
        self._fixed: dict[int, TokenMask] = {}
        """Per padded size, the fixed layout's device views (for the words of `_fixed_words`)."""
        self._fixed_words = 0
        self._pinned = device.type == "cuda"
        self._host: list[torch.Tensor | None] = [None, None]
        self._parity = 0
        self._device_buffer: torch.Tensor | None = None
        self._layouts: list[_Layout | None] = [None, None]
        """Per buffer, the layout it last handed out (kept while its shape and memory are unchanged)."""
        self._handed: _Layout | None = None
        """The layout of the buffers last handed out, until `upload` takes it."""
        self._uploaded = (0, 0, 0)
        """The shape `upload` last copied from its own buffers; rows 0 after arrays of the caller's."""
        self._wide = [False, False]
        """Per buffer, whether it held a step of more than `max_rows` rows since its index was last reset."""

    def buffers(self, num_rows: int, num_masked: int, words: int) -> HostTokenMask:
        """Empty mask arrays for one step, laid out as `upload` copies them."""
        self._parity ^= 1
        layout = self._layouts[self._parity]
        if layout is None or layout.shape != (num_rows, num_masked, words):
            layout = self._layout(num_rows, num_masked, words)
            self._layouts[self._parity] = layout
        wide = num_rows > self.max_rows
        if self._wide[self._parity] and not wide:  # its indices may reach past max_rows: -1 again
            self._host[self._parity][: self._index_bytes].view(torch.int32).fill_(-1)  # type: ignore[index]
        self._wide[self._parity] = wide
        self._handed = layout
        return layout.host

    def _layout(self, num_rows: int, num_masked: int, words: int) -> _Layout:
        """The arrays and views of one shape in the current buffer, grown if too small (the device buffer too:
        then the other buffer's layout, whose views are of the old one, is dropped)."""
        index_bytes = self._index_bytes if num_rows <= self.max_rows else _aligned(num_rows * 4)
        need = index_bytes + num_masked * words * 4
        least = max(need, self._index_bytes + self.max_rows * words * 4)  # the fixed layout's, at once
        host = self._host[self._parity]
        if host is None or host.numel() < need:
            host = torch.empty(max(least, 2 * (host.numel() if host is not None else 0)), dtype=torch.uint8)
            host = host.pin_memory() if self._pinned else host
            host[: self._index_bytes].view(torch.int32).fill_(-1)  # the fixed index past a step's rows
            self._host[self._parity] = host
        source = host[:need]
        if self.device.type == "cpu":
            staged = source  # the host memory is the device's: nothing to copy
        else:
            if self._device_buffer is None or self._device_buffer.numel() < need:
                self._device_buffer = torch.full((host.numel(),), 255, dtype=torch.uint8, device=self.device)  # -1s
                self._layouts = [None, None]  # their device views are of the old buffer
                self._fixed = {}
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
            self._uploaded = (0, 0, 0)
            return TokenMask(  # arrays of its own (a test's): copied as they are
                torch.from_numpy(np.ascontiguousarray(mask.bitmask)).to(self.device),
                torch.from_numpy(np.ascontiguousarray(mask.mask_index)).to(self.device),
            )
        if layout.staged is not layout.source:
            layout.staged.copy_(layout.source, non_blocking=self._pinned)
        self._uploaded = layout.shape
        return layout.device

    def fixed(self, size: int) -> TokenMask | None:
        """The masks just uploaded, as a bucket of `size` padded rows reads them at fixed addresses: a row
        index for each of them, and the bitmask of `max_rows` rows. None when the upload did not use the
        fixed layout (more rows than `max_rows`, arrays of the caller's own) or `size` exceeds it, or on
        the CPU (the host buffers alternate: no fixed address)."""
        rows, _, words = self._uploaded
        buffer = self._device_buffer
        fits = buffer is not None and self._index_bytes + self.max_rows * words * 4 <= buffer.numel()
        if not fits or not 0 < rows <= size <= self.max_rows:
            return None
        if words != self._fixed_words:
            self._fixed, self._fixed_words = {}, words
        views = self._fixed.get(size)
        if views is None:
            bitmask = buffer[self._index_bytes : self._index_bytes + self.max_rows * words * 4]
            views = TokenMask(
                bitmask.view(torch.int32).view(self.max_rows, words), buffer[: size * 4].view(torch.int32)
            )
            self._fixed[size] = views
        return views
