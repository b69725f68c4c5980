"""A checkpoint tensor read only when a weight_loader asks for it, and only the part it asks for.

Under tensor parallelism each rank keeps a slice of most weights (rows of q, k and v, columns of
o_proj, rows of the vocabulary). Reading a whole tensor and then slicing it would make every rank
read, and briefly hold, the whole model; a `LazyTensor` records the slice (`narrow`) and reads just
those bytes from the safetensors file (`load`), converting the dtype after narrowing, so a bf16 ->
float32 conversion never doubles a whole tensor either. It is valid while its file is open, that
is during the loader's pass over that file's tensors.

A weight_loader calls `.narrow` and `materialize`, which a plain tensor answers too, so it serves
both the loader (lazy tensors) and callers that pass real or meta tensors (model/inspect/consumption.py).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch


class LazyTensor:
    def __init__(
        self,
        source: Any,
        read_all: Callable[[], torch.Tensor],
        index: tuple[tuple[int, int], ...] | None = None,
    ) -> None:
        """`source`: a safetensors slice (`safe_open(...).get_slice(name)`); `read_all` reads the whole
        tensor (`get_tensor`), used when nothing was narrowed; `index`: (start, stop) per dimension."""
        self.source, self.read_all = source, read_all
        self.index = index if index is not None else tuple((0, n) for n in source.get_shape())

    @property
    def shape(self) -> torch.Size:
        return torch.Size(stop - start for start, stop in self.index)

    def dim(self) -> int:
        return len(self.index)

    def narrow(self, dim: int, start: int, length: int) -> LazyTensor:
        """Rows [start, start + length) of dimension `dim`, still unread."""
        dim = dim % len(self.index)
        if start < 0 or length < 0 or start + length > self.shape[dim]:
            raise ValueError(f"cannot take [{start}, {start + length}) of dimension {dim} of shape {tuple(self.shape)}")
        first, _ = self.index[dim]
        index = list(self.index)
        index[dim] = (first + start, first + start + length)
        return LazyTensor(self.source, self.read_all, tuple(index))

    def is_whole(self) -> bool:
        return all(start == 0 and stop == n for (start, stop), n in zip(self.index, self.source.get_shape()))

    def load(self, dtype: torch.dtype | None = None) -> torch.Tensor:
        """Read the recorded slice (only it) from the file, then convert it to `dtype`."""
        tensor = self.read_all() if self.is_whole() else self.source[tuple(slice(a, b) for a, b in self.index)]
        return tensor if dtype is None else tensor.to(dtype)


def materialize(tensor: torch.Tensor | LazyTensor, dtype: torch.dtype) -> torch.Tensor:
    """The values, in `dtype`: a lazy tensor is read now (its slice only)."""
    if isinstance(tensor, LazyTensor):
        return tensor.load(dtype)
    return tensor.to(dtype)


def reads_lazily(loader: Callable) -> Callable:
    """Mark a weight_loader that narrows and materializes what it gets itself: the loader then hands it
    a LazyTensor. An unmarked one (layers/quantization/sources.py's staging, say) gets the whole tensor, read and
    converted to the parameter's dtype, as before tensor parallelism."""
    loader.reads_lazily = True  # type: ignore[attr-defined]
    return loader
