"""Launch shapes of the quantized matmul: the candidates, a default rule, and a measured table per GPU.

A launch shape (`QuantTiles`) is picked per call from (format, row bucket, N, K). The table that
benchmarks/quant_kernels.py --sweep writes (every candidate of `candidates` timed at each shape
and row bucket on the GPU, the fastest kept) is read once per process from $MOPT_QUANT_TILES or,
failing that, from quant_tiles.json beside this module, and only when its "gpu" names the device in
use: tiles tuned on an H200 say nothing about another GPU. Shapes it lacks take `default_tiles`.
Everything here is plain Python on shapes, so a lookup is free inside CUDA-graph capture (no
autotuning, no host sync).
"""

from __future__ import annotations

import dataclasses
import functools
import json
import os
from dataclasses import asdict, dataclass
from pathlib import Path

MAX_SPLIT_K = 16
ROW_BUCKETS = (1, 16, 64, 512)
"""Rows (tokens) a table entry covers: up to 1, 2-16, 17-64 and above 64 (measured at 512)."""
TABLE_ENV = "MOPT_QUANT_TILES"
PACKAGED_TABLE = Path(__file__).with_name("quant_tiles.json")


@dataclass(frozen=True)
class QuantTiles:
    """Launch shape of `quant_kernels._quant_matmul_kernel` (or, for fp8, `backend="scaled_mm"`).

    block_m 1 selects the CUDA-core GEMV (one row), 16 or more the tensor-core program; split_k is
    the number of K slices (output tiles x split_k programs). num_stages is Triton's pipeline depth
    for the tensor-core program; for the GEMV, >= 2 prefetches the next tile into registers (int4
    always, int8/fp8 when block_k <= 256 divides K: quant_matmul.prefetches). Every block size is a
    power of two (quant_matmul._check_tiles)."""

    block_m: int
    block_n: int
    block_k: int
    split_k: int = 1
    num_warps: int = 4
    num_stages: int = 3
    backend: str = "triton"
    planes: bool = True
    """int4 tensor-core tiles: eight nibble-plane dots (True) or nibbles unpacked into K order, one dot."""


def row_bucket(m: int) -> int:
    """The table's row bucket holding m rows."""
    return next((b for b in ROW_BUCKETS if m <= b), ROW_BUCKETS[-1])


def split_for(n: int, k: int, block_n: int, block_k: int, tiles_m: int, waves: float, num_sms: int) -> int:
    """K slices that make about `waves` x num_sms programs, each keeping at least two K tiles (waves 0: none)."""
    if waves <= 0:
        return 1
    tiles = -(-n // block_n) * tiles_m
    want = -(-int(waves * num_sms) // tiles)
    return max(1, min(want, k // (2 * block_k), MAX_SPLIT_K))


# (block_m, block_n, block_k, waves, num_warps, num_stages). waves x SMs is the number of programs
# split-K aims at (0: no split). int4's block_k counts columns, 128 per group slice, so its tiles
# carry a quarter of the bytes of the same block_k in int8/fp8; its lists reach further along K.
_DECODE_DOTS = [  # tensor cores, the activation rows padded to 16
    (16, 64, 256, 2, 4, 3),
    (16, 128, 128, 2, 4, 3),
    (16, 32, 256, 4, 4, 4),
    (16, 64, 128, 4, 4, 4),
    (16, 64, 256, 4, 4, 4),
    (16, 128, 256, 1, 8, 3),
    (16, 64, 512, 2, 4, 3),
    (16, 256, 128, 1, 8, 3),
]
_GEMVS = {  # one row on CUDA cores: no pipelining, so the tile of one iteration is what is in flight
    "bytes": [  # stages 2: the next tile prefetched into registers (quant_matmul.prefetches), 1: not
        (1, 32, 256, 4, 4, 1),
        (1, 32, 256, 4, 4, 2),
        (1, 64, 256, 4, 8, 1),
        (1, 64, 256, 4, 8, 2),
        (1, 64, 512, 2, 8, 1),
        (1, 128, 256, 2, 8, 2),
        (1, 32, 512, 8, 4, 1),
        (1, 16, 256, 8, 4, 2),
    ],
    "int4": [  # more rows a thread (larger block_n a warp) reuse each activation load more often;
        # stages 2: the next tile prefetched into registers (quant_matmul.prefetches), 1: not
        (1, 32, 256, 4, 4, 1),
        (1, 64, 256, 4, 4, 1),
        (1, 64, 256, 4, 4, 2),
        (1, 128, 256, 2, 4, 2),
        (1, 64, 512, 2, 8, 1),
        (1, 64, 512, 2, 8, 2),
        (1, 128, 512, 2, 8, 1),
        (1, 32, 512, 4, 4, 2),
        (1, 16, 512, 8, 4, 1),
        (1, 32, 1024, 4, 8, 1),
    ],
}
_CANDIDATES = {
    1: _DECODE_DOTS[:5],  # plus the CUDA-core GEMVs of the format
    16: _DECODE_DOTS,
    64: [
        (64, 64, 128, 2, 4, 3),
        (64, 128, 128, 1, 8, 3),
        (64, 128, 64, 2, 4, 4),
        (32, 128, 128, 2, 4, 3),
        (64, 128, 256, 1, 8, 3),
        (64, 256, 128, 1, 8, 3),
        (32, 64, 256, 2, 4, 4),
    ],
    512: [
        (128, 128, 64, 0, 8, 3),
        (64, 128, 128, 0, 4, 3),
        (128, 64, 128, 1, 4, 3),
    ],
}


def _make(kind: str, m: int, n: int, k: int, spec: tuple, num_sms: int) -> QuantTiles:
    block_m, block_n, block_k, waves, num_warps, num_stages = spec
    if kind == "int4":
        block_k = max(128, block_k)  # whole group slices (quant_kernels.INT4_BLOCK_K)
    tiles_m = 1 if block_m == 1 else -(-m // block_m)
    split = split_for(n, k, block_n, block_k, tiles_m, waves, num_sms)
    return QuantTiles(block_m, block_n, block_k, split, num_warps, num_stages)


def candidates(kind: str, m: int, n: int, k: int, num_sms: int, fp8_scaled_mm: bool = False) -> list[QuantTiles]:
    """Distinct launch shapes worth timing for this call (the sweep's search space)."""
    specs = _CANDIDATES[row_bucket(m)]
    if m == 1:
        specs = specs + _GEMVS["int4" if kind == "int4" else "bytes"]
    found = [_make(kind, m, n, k, s, num_sms) for s in specs if (k >= s[2] or s[0] != 1)]
    if kind == "int4":  # both ways of feeding nibbles to tl.dot
        found += [dataclasses.replace(t, planes=False) for t in found if t.block_m != 1]
    if fp8_scaled_mm and kind == "fp8" and m > 16:
        found.append(QuantTiles(0, 0, 0, backend="scaled_mm"))
    return list(dict.fromkeys(found))


def default_tiles(kind: str, m: int, n: int, k: int, num_sms: int, fp8_scaled_mm: bool = False) -> QuantTiles:
    """The rule for shapes without a measurement: tensor-core tiles throughout, split-K for decode."""
    if fp8_scaled_mm and kind == "fp8" and m > 16:
        return QuantTiles(0, 0, 0, backend="scaled_mm")  # _scaled_mm matches bf16 from M ~ 64 (issue 16)
    bucket = row_bucket(m)
    return _make(kind, m, n, k, _CANDIDATES[bucket][0], num_sms)


def table_key(kind: str, m: int, n: int, k: int) -> str:
    return f"{kind}:{row_bucket(m)}:{n}:{k}"


def read_table(path: str | Path) -> dict:
    """A sweep table: {"gpu": name, "entries": {table_key: QuantTiles fields}}; ValueError if malformed."""
    data = json.loads(Path(path).read_text())
    if not isinstance(data, dict) or not isinstance(data.get("entries"), dict) or "gpu" not in data:
        raise ValueError(f"{path}: a tile table needs 'gpu' and 'entries' (written by quant_kernels.py --sweep)")
    return {"gpu": data["gpu"], "entries": {key: QuantTiles(**fields) for key, fields in data["entries"].items()}}


def table_json(gpu: str, entries: dict[str, QuantTiles]) -> dict:
    return {"gpu": gpu, "entries": {key: asdict(tiles) for key, tiles in sorted(entries.items())}}


@functools.cache
def _table_for(gpu: str) -> dict[str, QuantTiles]:
    """Entries of the table for this GPU name, read once; {} when there is none or it is for another GPU."""
    path = os.environ.get(TABLE_ENV) or (PACKAGED_TABLE if PACKAGED_TABLE.exists() else None)
    if not path:
        return {}
    table = read_table(path)
    return table["entries"] if table["gpu"] == gpu else {}


def lookup(gpu: str, kind: str, m: int, n: int, k: int) -> QuantTiles | None:
    """The measured tiles for this call on this GPU, if the table has them."""
    return _table_for(gpu).get(table_key(kind, m, n, k))
