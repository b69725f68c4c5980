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

from model_optimizer.common.fileio import read_json
from model_optimizer.common.safetensors_dtypes import DTYPE_BYTES

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
    tensors = {}
    for name, entry in header.items():
        try:
            tensors[name] = TensorInfo(name, str(entry["dtype"]), tuple(int(d) for d in entry["shape"]), path.name)
        except (KeyError, TypeError, ValueError):
            raise ValueError(f"{path}: header entry {name!r} lacks a dtype or shape") from None
        if any(d < 0 for d in tensors[name].shape):  # the meta tensors built from it would fail in torch
            raise ValueError(f"{path}: header entry {name!r} has a negative dimension {list(tensors[name].shape)}")
    return tensors, metadata


def checkpoint_files(model_dir: Path) -> list[Path]:
    """The safetensors files the engine would load, by the loader's rule: the index's shards when
    model.safetensors.index.json exists, else every *.safetensors file in the folder."""
    index = model_dir / "model.safetensors.index.json"
    if index.is_file():
        data = read_json(index)
        weight_map = data.get("weight_map") if isinstance(data, dict) else None
        if not isinstance(weight_map, dict) or not all(isinstance(n, str) for n in weight_map.values()):
            raise ValueError(f"{index} must hold a 'weight_map' object of tensor name -> shard file name")
        files = sorted({model_dir / name for name in weight_map.values()})
        missing = [f.name for f in files if not f.is_file()]
        if missing:
            raise FileNotFoundError(f"{index} lists shards that are missing: {', '.join(missing)}")
        return files
    return sorted(model_dir.glob("*.safetensors"))


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
