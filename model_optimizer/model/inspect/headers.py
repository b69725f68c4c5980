"""Read safetensors headers (the JSON at the front of each file), never the tensor data.

A safetensors file is an 8-byte little-endian header length, a JSON header naming every tensor's
dtype, shape and byte range, then the raw bytes. Reading only the header makes a census of a
tens-of-GB checkpoint cost one small read per shard. Which files form the checkpoint follows the
engine's loader rule (the index's weight map when present, else every *.safetensors file).
"""

from __future__ import annotations

import json
import struct
from dataclasses import dataclass
from pathlib import Path

from model_optimizer.common.checkpoint_files import safetensors_files
from model_optimizer.common.safetensors_dtypes import DTYPE_BYTES
from model_optimizer.runtime.sampling_checks import is_int

MAX_HEADER_BYTES = 100 << 20
"""A header larger than this is a corrupt length field, not a real checkpoint."""

DTYPE_NAMES = {
    "F64": "float64",
    "F32": "float32",
    "F16": "float16",
    "BF16": "bfloat16",
    "F8_E4M3": "float8_e4m3fn",
    "F8_E5M2": "float8_e5m2",
    "F8_E8M0": "float8_e8m0fnu",
    "I64": "int64",
    "I32": "int32",
    "I16": "int16",
    "I8": "int8",
    "U8": "uint8",
    "U16": "uint16",
    "U32": "uint32",
    "U64": "uint64",
    "BOOL": "bool",
}
FLOAT_DTYPES = ("F64", "F32", "F16", "BF16", "F8_E4M3", "F8_E5M2")
CAST_DTYPES = ("bfloat16", "float16", "float32")
"""What `mopt inspect --fix --dtype` can cast a checkpoint's floats to."""


@dataclass(frozen=True)
class TensorInfo:
    """One tensor as its header declares it."""

    name: str
    dtype: str
    """The safetensors code: BF16, F32, I8, ..."""
    shape: tuple[int, ...]
    file: str
    """The shard's file name, relative to the checkpoint folder."""
    data_offsets: tuple[int, int] | None = None
    """[start, end) of its bytes after the header, as the header says; None when it says nothing usable."""

    @property
    def numel(self) -> int:
        count = 1
        for dim in self.shape:
            count *= dim
        return count

    @property
    def nbytes(self) -> int:
        return self.numel * DTYPE_BYTES.get(self.dtype, 1)

    @property
    def dtype_name(self) -> str:
        return DTYPE_NAMES.get(self.dtype, self.dtype.lower())


def read_header(path: Path) -> tuple[dict[str, TensorInfo], dict[str, str]]:
    """(tensors by name, the __metadata__ strings) of one safetensors file; ValueError naming the
    file when its header is not a safetensors header."""
    if not path.is_file():  # a folder named *.safetensors: IsADirectoryError would name neither fix nor rule
        raise ValueError(f"{path} is not a safetensors file: it is not a regular file")
    size = path.stat().st_size
    with path.open("rb") as f:
        head = f.read(8)
        if len(head) < 8:
            raise ValueError(f"{path} is not a safetensors file: shorter than its 8-byte header length")
        (length,) = struct.unpack("<Q", head)
        if length > min(MAX_HEADER_BYTES, size - 8):
            raise ValueError(
                f"{path} is not a safetensors file: header length {length} does not fit a file of {size} bytes"
            )
        raw = f.read(length)
    try:
        header = json.loads(raw)
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise ValueError(f"{path}: the safetensors header is not JSON ({exc})") from None
    if not isinstance(header, dict):
        raise ValueError(f"{path}: the safetensors header is not a JSON object")
    metadata = header.pop("__metadata__", None) or {}
    if not isinstance(metadata, dict):  # the quantization rules read it as a mapping
        raise ValueError(f"{path}: the safetensors header's __metadata__ is not a JSON object")
    tensors = {}
    for name, entry in header.items():
        try:
            dtype, shape = entry["dtype"], entry["shape"]
        except (KeyError, TypeError):
            raise ValueError(f"{path}: header entry {name!r} lacks a dtype or shape") from None
        if not isinstance(dtype, str) or not isinstance(shape, list):
            raise ValueError(f"{path}: header entry {name!r} lacks a dtype or shape") from None
        # int(64.7) would be 64 and int(True) 1: a shape the safetensors library refuses read as a valid one
        if not all(is_int(d) and d >= 0 for d in shape):
            raise ValueError(f"{path}: header entry {name!r} has a shape that is not non-negative integers: {shape}")
        offsets = entry.get("data_offsets")
        valid = isinstance(offsets, list) and len(offsets) == 2 and all(is_int(v) for v in offsets)
        tensors[name] = TensorInfo(name, dtype, tuple(shape), path.name, tuple(offsets) if valid else None)
    return tensors, metadata


def layout_error(path: Path, tensors: list[TensorInfo]) -> str | None:
    """Why the safetensors library refuses the byte ranges of `path`, whose header declares `tensors`, or
    None: every tensor needs data_offsets; in offset order each starts where the one before ends (the
    first at 0), none overlapping, none leaving a gap ("invalid offset"); and the last one ends the file
    ("file not fully covered"). Spans of the wrong size and a file too short for them are the engine's own
    check (checkpoint_reader.check_safetensors_header)."""
    error = _offset_error(tensors)
    if error is not None:
        return error
    with path.open("rb") as f:
        data_start = 8 + struct.unpack("<Q", f.read(8))[0]
    end = data_start + max((t.data_offsets[1] for t in tensors), default=0)
    size = path.stat().st_size
    if size > end:
        return f"{size - end} bytes follow the last tensor (the file has {size}, its tensors end at {end})"
    return None


def _offset_error(tensors: list[TensorInfo]) -> str | None:
    unplaced = [t.name for t in tensors if t.data_offsets is None]
    if unplaced:
        return f"tensor {unplaced[0]!r} has no data_offsets of two integers"
    end = 0
    for t in sorted(tensors, key=lambda t: t.data_offsets):
        start, stop = t.data_offsets
        if start != end or stop < start:
            what = "overlaps the tensor before it" if start < end else "leaves a gap" if start > end else "ends first"
            return f"tensor {t.name!r} has data_offsets {list(t.data_offsets)}: it {what} (expected to start at {end})"
        end = stop
    return None


def checkpoint_files(model_dir: Path) -> list[Path]:
    """The safetensors files the engine would load, by the loader's own rule (checkpoint_reader): the
    index's shards when model.safetensors.index.json exists, else every *.safetensors file in the folder;
    [] for a folder without any, which inspect reports as a finding rather than an error."""
    if not (model_dir / "model.safetensors.index.json").is_file() and not any(
        p.is_file()
        for p in model_dir.glob("*.safetensors")  # a folder named like a shard is none
    ):
        return []
    return safetensors_files(model_dir)


def read_tensors(model_dir: Path) -> list[TensorInfo]:
    """Every tensor of every shard, in file then header order; ValueError if a name repeats."""
    seen: dict[str, str] = {}
    tensors: list[TensorInfo] = []
    for path in checkpoint_files(model_dir):
        for name, info in read_header(path)[0].items():
            if name in seen:
                raise ValueError(f"tensor {name!r} is in both {seen[name]} and {path.name}")
            seen[name] = path.name
            tensors.append(info)
    return tensors
