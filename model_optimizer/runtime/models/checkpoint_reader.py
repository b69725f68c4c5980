"""A checkpoint's safetensors files: which they are (model.safetensors.index.json's shards, or every
*.safetensors file), their framing checked in plain words, and their tensors handed out unread
(LazyTensor), so that under tensor parallelism a rank reads only the slice it keeps.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterator
from functools import partial
from pathlib import Path

import torch
from safetensors import SafetensorError, safe_open

from model_optimizer.common.checkpoint_files import safetensors_files
from model_optimizer.common.safetensors_dtypes import DTYPE_BYTES
from model_optimizer.runtime.layers.lazy_tensor import LazyTensor


def iterate_lazy_checkpoint(model_dir: Path) -> Iterator[tuple[Path, str, LazyTensor]]:
    """(file, tensor name, unread tensor) of every checkpoint tensor: nothing is read until the
    consumer loads (a slice of) it, which it must do before asking for the next tensor."""
    for path in safetensors_files(model_dir):
        check_safetensors_header(path)
        try:
            with safe_open(str(path), framework="pt") as f:
                for name in f.keys():
                    yield path, name, LazyTensor(f.get_slice(name), partial(f.get_tensor, name))
        except SafetensorError as exc:
            raise unreadable(path, exc) from None


def read_lazy(path: Path, lazy: LazyTensor, dtype: torch.dtype | None = None) -> torch.Tensor:
    """`lazy` read (in `dtype`), a file the library cannot read reported as `unreadable`."""
    try:
        return lazy.load(dtype)
    except SafetensorError as exc:
        raise unreadable(path, exc) from None


def unreadable(path: Path, exc: Exception) -> ValueError:
    """The error for a file the safetensors library cannot read, naming it and the fix."""
    return ValueError(f"{path} is not a readable safetensors file ({exc}); download or save it again")


def check_safetensors_header(path: Path) -> None:
    """ValueError saying what is wrong with the file's framing: an 8-byte little-endian header length,
    that many bytes of JSON header, then the tensor data the header's offsets cover exactly. Checked
    here, in plain words, because the safetensors library's own message names neither the file nor a fix."""
    size = path.stat().st_size
    with path.open("rb") as f:
        head = f.read(8)
        if len(head) < 8:
            raise ValueError(
                f"{path} is not a safetensors file: {size} bytes, too short for a header; "
                "it is empty or truncated, download or save it again"
            )
        header_len = int.from_bytes(head, "little")
        if header_len > size - 8:
            raise ValueError(
                f"{path} is not a valid safetensors file: its header claims {header_len} bytes but the "
                f"file has {size}; it is truncated or not a safetensors file, download or save it again"
            )
        try:
            header = json.loads(f.read(header_len))
        except (UnicodeDecodeError, json.JSONDecodeError) as exc:
            raise ValueError(
                f"{path} is not a valid safetensors file: its header is not JSON ({exc}); "
                "the file is corrupt, download or save it again"
            ) from None
    if not isinstance(header, dict):
        raise ValueError(f"{path} is not a valid safetensors file: its header is not a JSON object")
    ends = [
        e["data_offsets"][1]
        for k, e in header.items()
        if k != "__metadata__"
        and isinstance(e, dict)
        and isinstance(e.get("data_offsets"), list)
        and len(e["data_offsets"]) == 2
    ]
    expected = 8 + header_len + max(ends, default=0)
    if size < expected:
        raise ValueError(
            f"{path} is truncated: its tensors need {expected} bytes, the file has {size}; download or save it again"
        )
    for name, entry in header.items():
        _check_span(path, name, entry)


def _check_span(path: Path, name: str, entry: object) -> None:
    """ValueError when a header entry's byte range is not what its dtype and shape take (safetensors refuses
    such a file with "invalid shape, data type, or offset", naming neither the file nor the tensor)."""
    if name == "__metadata__" or not isinstance(entry, dict):
        return
    offsets, shape, width = entry.get("data_offsets"), entry.get("shape"), DTYPE_BYTES.get(entry.get("dtype"))
    if not (isinstance(offsets, list) and len(offsets) == 2 and isinstance(shape, list) and width is not None):
        return  # the library's own checks name what is missing
    if not all(isinstance(v, int) for v in (*offsets, *shape)):
        return
    need = width * math.prod(shape)
    if offsets[1] - offsets[0] != need:
        raise ValueError(
            f"{path} is not a valid safetensors file: tensor {name!r} spans {offsets[1] - offsets[0]} bytes, "
            f"but its dtype {entry['dtype']} and shape {shape} take {need}; the file is corrupt, download or "
            "save it again"
        )
