"""Launch shapes of the fused MoE kernel: a default rule, the candidates a sweep times, a measured table.

A launch shape (`MoeTiles`) is picked per call from the expert shape (experts, hidden, intermediate,
top_k) and a bucket of the token count. The rows of one block (`block_m`) are shared by both GEMMs:
the tokens are sorted into blocks of that many rows once. Each GEMM then has its own tile of
output columns and reduction (`GemmTiles`).

The table that `benchmarks/moe_kernels.py --sweep` writes (every candidate timed per shape and
bucket on the GPU, the fastest kept) is read once per process from $MOPT_MOE_TILES or, failing
that, moe_tiles.json beside this module, and only when its "gpu" names the device in use. Shapes it
lacks take `default_tiles`. Everything here is plain Python on shapes, so a lookup is free inside
CUDA-graph capture.
"""

from __future__ import annotations

import functools
import json
import os
from dataclasses import asdict, dataclass
from pathlib import Path

TOKEN_BUCKETS = (1, 8, 32, 64, 128, 256, 512, 4096)
"""Token counts a table entry covers: up to 1, 2-8, 9-32, ..., 257-512 and above (measured at 4096).
Decode batches up to 256 get buckets of their own: the mean rows per expert, which decides the
block height and tiles, doubles from one bucket to the next."""
TABLE_ENV = "MOPT_MOE_TILES"
PACKAGED_TABLE = Path(__file__).with_name("moe_tiles.json")


@dataclass(frozen=True)
class GemmTiles:
    """One grouped GEMM's tile: block_n output columns, block_k of the reduction per step."""

    block_n: int
    block_k: int
    num_warps: int = 4
    num_stages: int = 3


@dataclass(frozen=True)
class MoeTiles:
    block_m: int
    """Rows (token-expert pairs) per block; each expert's pairs are padded to a multiple of it."""
    gate_up: GemmTiles
    """The first GEMM: [gate | up] rows of each expert, then silu(gate) * up."""
    down: GemmTiles
    """The second GEMM: the down projection, scaled by the routing weight."""

    @classmethod
    def from_dict(cls, data: dict) -> MoeTiles:
        return cls(data["block_m"], GemmTiles(**data["gate_up"]), GemmTiles(**data["down"]))


def token_bucket(num_tokens: int) -> int:
    return next((b for b in TOKEN_BUCKETS if num_tokens <= b), TOKEN_BUCKETS[-1])


def default_tiles(num_tokens: int, num_experts: int, top_k: int) -> MoeTiles:
    """The rule for shapes without a measurement: rows per block from the mean pairs per expert.

    Decode gives each expert a handful of rows, so blocks of 16 (the smallest tensor-core tile) waste
    least; long prefills give each expert hundreds, where larger blocks reuse each weight tile more."""
    per_expert = num_tokens * top_k / num_experts
    if per_expert <= 16:
        return MoeTiles(16, GemmTiles(64, 128), GemmTiles(64, 128))
    if per_expert <= 64:
        return MoeTiles(32, GemmTiles(64, 128), GemmTiles(128, 64))
    return MoeTiles(64, GemmTiles(128, 64, 8), GemmTiles(128, 64, 8))


GEMM_CANDIDATES = (
    GemmTiles(32, 128),
    GemmTiles(64, 64),
    GemmTiles(64, 128),
    GemmTiles(64, 256, 4, 2),
    GemmTiles(128, 64, 8),
    GemmTiles(128, 128, 8, 2),
    GemmTiles(64, 128, 4, 4),
    GemmTiles(128, 64, 4, 4),
    GemmTiles(32, 256, 4, 3),
    # one token (batch-1 decode): few programs per expert, so narrower tiles and deeper pipelines
    GemmTiles(32, 128, 4, 4),
    GemmTiles(32, 256, 4, 4),
    GemmTiles(16, 256, 4, 4),
    GemmTiles(64, 128, 4, 5),
    GemmTiles(32, 512, 4, 2),
)
"""Tiles each GEMM is timed with in a sweep; the two GEMMs are timed apart (for each block_m) and
the fastest of each kept, so a sweep costs rows x 2 x len(GEMM_CANDIDATES) timings, not their square."""


def candidate_rows(num_tokens: int, num_experts: int, top_k: int) -> list[int]:
    """Block rows worth timing for this bucket: around the mean pairs per expert."""
    per_expert = num_tokens * top_k / num_experts
    return [16, 32] if per_expert <= 16 else [16, 32, 64] if per_expert <= 64 else [32, 64, 128]


def table_key(num_experts: int, hidden: int, intermediate: int, top_k: int, num_tokens: int) -> str:
    return f"{num_experts}:{hidden}:{intermediate}:{top_k}:{token_bucket(num_tokens)}"


def read_table(path: str | Path) -> dict:
    """A sweep table: {"gpu": name, "entries": {table_key: MoeTiles fields}}; ValueError if malformed."""
    data = json.loads(Path(path).read_text())
    if not isinstance(data, dict) or not isinstance(data.get("entries"), dict) or "gpu" not in data:
        raise ValueError(f"{path}: a MoE tile table needs 'gpu' and 'entries' (written by moe_kernels.py --sweep)")
    return {"gpu": data["gpu"], "entries": {key: MoeTiles.from_dict(v) for key, v in data["entries"].items()}}


def table_json(gpu: str, entries: dict[str, MoeTiles]) -> dict:
    return {"gpu": gpu, "entries": {key: asdict(tiles) for key, tiles in sorted(entries.items())}}


@functools.cache
def _table_for(gpu: str) -> dict[str, MoeTiles]:
    path = os.environ.get(TABLE_ENV) or (PACKAGED_TABLE if PACKAGED_TABLE.exists() else None)
    if not path:
        return {}
    table = read_table(path)
    return table["entries"] if table["gpu"] == gpu else {}


def choose_tiles(gpu: str, num_tokens: int, num_experts: int, hidden: int, intermediate: int, top_k: int) -> MoeTiles:
    """The table's measured tiles for this GPU and shape, else `default_tiles`."""
    found = _table_for(gpu).get(table_key(num_experts, hidden, intermediate, top_k, num_tokens)) if gpu else None
    return found or default_tiles(num_tokens, num_experts, top_k)
