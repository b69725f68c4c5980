"""Launch shapes of the quantized matmul: the candidates (their specs: quant_tile_specs), a default rule, and
a measured table per GPU.

A launch shape (`QuantTiles`) is picked per call from (format, row bucket, N, K). The table that
benchmarks/quant_kernels.py --sweep writes (every candidate of `candidates` timed at each shape
and row bucket on the GPU, the fastest kept) is read once per process from $MOPT_QUANT_TILES or,
failing that, from quant_tiles.json beside this module, and only when its "gpu" names the device in
use, or, for the formats its "also" lists beside another GPU's name, on that GPU: where decode steps
measured faster with that table than with the default rule (the H200's int4, fp8 and int8 entries on
the H100 SXM). Another GPU or format, one not measured, takes `default_tiles`, as do the shapes the
table lacks.
Where the fastest launch is "dequant" (the weight widened into a scratch buffer, which a CUDA-graph
capture cannot grow), the table also holds the fastest launch a capture can take (its "capture"
entries), and a capture without the buffer takes that one. Everything here is plain Python on shapes, so a
lookup is free inside CUDA-graph capture (no autotuning, no host sync).
"""

from __future__ import annotations

import dataclasses
import functools
import json
import logging
import os
from dataclasses import asdict, dataclass
from pathlib import Path

from model_optimizer.runtime.kernels.quant_tile_specs import (
    BYTES_MMA,
    GEMVS,
    GLUON_DEFAULT,
    INT4_GLUON,
    INT4_MMA,
    W8A8_MMA,
)

MAX_SPLIT_K = 16
ROW_BUCKETS = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512)
"""Rows (tokens) a table entry covers: up to 1, 2, 4, ... 256, and above 256 (prefill, measured at 512)."""
FP8_ANY = "fp8a"
"""Table format of the fastest fp8 launch among weight-only and W8A8 ones ("fp8": weight-only only)."""
INT8_ANY = "int8a"
"""The same for int8 weights: the fastest of the weight-only launches and the int8 x int8 W8A8 ones."""
ANY_KINDS = {"fp8": FP8_ANY, "int8": INT8_ANY}
"""Weight format -> table format of its fastest launch, W8A8 included (for callers that accept
quantized activations)."""
TABLE_ENV = "MOPT_QUANT_TILES"
TABLE_VERSION = 2
"""Tables of another version were measured on other kernels (version 1: int4 in the sequential packing,
per-group rescaling after each dot) and are not read."""
PACKAGED_TABLE = Path(__file__).with_name("quant_tiles.json")
logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class QuantTiles:
    """Launch shape of `quant_kernels._quant_matmul_kernel` (or another backend: `backend`).

    block_m 1 selects the CUDA-core GEMV (one row), 16 or more the tensor-core program; split_k is
    the number of K slices (output tiles x split_k programs). num_stages is Triton's pipeline depth
    for the tensor-core program; for the GEMV, >= 2 prefetches the next tile into registers (int4
    always, int8/fp8 when block_k <= 256 divides K: quant_matmul.prefetches). Every block size is a
    power of two (quant_matmul._check_tiles); int4 tensor-core tiles are one 128-column block deep."""

    block_m: int
    block_n: int
    block_k: int
    split_k: int = 1
    num_warps: int = 4
    num_stages: int = 3
    backend: str = "triton"
    """triton (our program), gluon (int4 on sm_90: kernels/int4_gluon.py, block_m tokens by block_n weight
    rows, num_stages its shared-memory ring), scaled_mm (fp8 W8A8 through torch._scaled_mm), int_mm (int8
    W8A8 through torch._int_mm, cuBLAS's int8 GEMM, then the scales in one Triton pass), dequant (the whole
    weight widened once into a scratch buffer, then a dense matmul: prefill sizes) or torch (bf16 weights:
    F.linear, i.e. cuBLAS)."""
    w8a8: bool = False
    """fp8 and int8 only: quantize the activations per token (one more launch) and multiply e4m3 by
    e4m3, or int8 by int8."""
    accumulators: int = 1
    """int4 tensor-core tiles only: 4 gives each of a planes block's four dots an accumulator of its own
    (summed at the end), so that no dot waits for the one before and Triton issues them asynchronously:
    the widening of the next plane runs on the CUDA cores while the tensor cores multiply. With one
    accumulator every plane's dot is waited for before the next plane is widened."""
    max_registers: int = 0
    """Our Triton program only: registers a thread may use (ptxas's maxnreg; 0: the compiler's choice). Fewer
    registers fit more programs on an SM, which hides more memory latency where the kernel waits on
    loads, at the cost of spills where it runs out."""

    @property
    def kernel(self) -> str:
        """gemv (CUDA cores, one row), mma (tensor cores, weights widened in registers), w8a8, scaled_mm,
        int_mm or dequant."""
        if self.backend != "triton":
            return self.backend
        return "w8a8" if self.w8a8 else ("gemv" if self.block_m == 1 else "mma")

    @property
    def compile_key(self) -> tuple:
        """The fields that make a distinct Triton compile of our program (the shape's own specializations
        aside: one split or several, even N and K, integers divisible by 16)."""
        return (
            self.block_m, self.block_n, self.block_k, self.num_warps, self.num_stages, self.accumulators, self.w8a8,
            self.max_registers,
        )  # fmt: skip

    @property
    def quantizes_activations(self) -> bool:
        """Whether this launch rounds the activations per token (W8A8), which the caller must allow."""
        return self.w8a8 or self.backend in ("scaled_mm", "int_mm")

    @property
    def graph_safe(self) -> bool:
        """Whether a CUDA-graph capture can take this launch whatever was allocated before: all but
        "dequant", whose scratch buffer may have to grow (quant_linear runs it in a capture only
        where the buffer already holds the weight)."""
        return self.backend != "dequant"


SCALED_MM = QuantTiles(0, 0, 0, backend="scaled_mm")
INT_MM = QuantTiles(0, 0, 0, backend="int_mm")
INT_MM_MIN_ROWS = 17
"""torch._int_mm needs more than 16 rows (and K, N multiples of 8)."""
W8A8_MIN_BUCKET = 128
"""The row bucket (above INT_MM_MIN_ROWS) from which fp8 and int8 take cuBLAS's GEMM (`_scaled_mm`,
`_int_mm`) without a measurement, where the caller accepts quantized activations: in the H200's sweeps
it beat the weight-only program's tiles there in most cases, by up to 3x on large shapes, and on the
H100 the table's `_scaled_mm` entries beat the weight-only default rule in the fp8 decode step at 256
rows (README, "Quantized linear kernels"). Our W8A8 program's measured tiles, faster still for int8,
stay the table's."""
DEQUANT = QuantTiles(0, 0, 0, backend="dequant")
TORCH = QuantTiles(0, 0, 0, backend="torch")
DENSE_MAX_ROWS = 64
"""bf16 weights: rows up to which our GEMV / tensor-core tiles are candidates against cuBLAS (skinny shapes)."""


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


def _wave_split(tiles: int, k: int, num_sms: int, per_sm: int = 1) -> int:
    """The most K splits of `tiles` wide Gluon tiles that make at most `per_sm` programs an SM, each split
    keeping two 128-column blocks at least (1 when the tiles alone fill that)."""
    return max(1, min(per_sm * num_sms // tiles, k // 256, MAX_SPLIT_K))


def gluon_candidates(m: int, n: int, k: int, num_sms: int) -> list[QuantTiles]:
    """The Gluon int4 kernel's launch shapes worth timing at m rows: token tiles no larger than the rows
    (16 at least) and at most four of them, each with one split of K and: up to 64 tokens, the split that
    makes about two waves of the SMs; above, the largest splits that make at most one and two programs per
    SM (about one wave and two: most of these tiles' shared memory fits one program an SM; wide weight
    tiles read x fewer times, and the split gives their few programs the SMs).
    For the sweep (`candidates(..., gluon=True)`) and benchmarks/int4_gluon.py."""
    found = []
    for block_m, block_n, warps, stages in INT4_GLUON:
        if block_m > max(16, m) or 4 * block_m < min(m, 256) or n % block_n:
            continue
        tiles_m = -(-m // block_m)
        if block_m <= 64:
            splits = {1, split_for(n, k, block_n, 128, tiles_m, 2, num_sms)}
        else:
            splits = {1} | {_wave_split(n // block_n * tiles_m, k, num_sms, per_sm) for per_sm in (1, 2)}
        found += [QuantTiles(block_m, block_n, 128, s, warps, stages, backend="gluon") for s in sorted(splits)]
    return found


GLUON_WIDE_WAVE = 0.8
"""Above 64 rows the default rule takes a wider tile (256 tokens, or 256 weight rows) where such tiles alone,
unsplit, make at least this share of a wave of programs."""


def gluon_default(m: int, n: int, k: int, num_sms: int) -> QuantTiles | None:
    """The default rule's Gluon int4 launch for 17-256 rows (None elsewhere, or where N is no multiple
    of 64). Up to 64 rows: token tiles of 32, weight tiles of 64 rows (128 where 64 would already make
    more than two waves), split-K to about two waves. Above: 128 x 128 tiles (8 warps), or a wider one
    where it fills about a wave unsplit (GLUON_WIDE_WAVE: 256 tokens above 128 rows, else 256 weight
    rows), split-K to the most splits that stay within one wave; wide weight tiles read x fewer times,
    and the split gives their few programs the SMs (N no multiple of 128: 64 x 64 or 128 x 64, unsplit).
    It follows the launches that won most often in the H200's and the H100's sweeps (README, "Wide tiles
    split to one wave"; benchmarks/results/kernels_h100/gluon_split/). The dispatch runs our Triton
    program where Gluon cannot (not sm_90 or not bf16)."""
    if not 16 < m <= 256 or n % 64:
        return None
    if m <= 64:
        block_m, tiles_m = 32, -(-m // 32)
        block_n = 128 if n % 128 == 0 and (n // 64) * tiles_m > 2 * num_sms else 64
        split = split_for(n, k, block_n, 128, tiles_m, 2, num_sms)
    elif n % 128:
        block_m, block_n, split = (64 if m <= 128 else 128), 64, 1
    else:
        wave = GLUON_WIDE_WAVE * num_sms
        if m > 128 and n // 128 >= wave:
            block_m, block_n = 256, 128
        elif n % 256 == 0 and (n // 256) * -(-m // 128) >= wave:
            block_m, block_n = 128, 256
        else:
            block_m, block_n = 128, 128
        split = _wave_split((n // block_n) * -(-m // block_m), k, num_sms)
    warps, stages = GLUON_DEFAULT[block_m, block_n]
    return QuantTiles(block_m, block_n, 128, split, warps, stages, backend="gluon")


def _specs(kind: str, bucket: int, w8a8: bool = False) -> list[tuple]:
    table = W8A8_MMA if w8a8 else (INT4_MMA if kind == "int4" else BYTES_MMA)
    return table[max(16, bucket)]


def _make(kind: str, m: int, n: int, k: int, spec: tuple, num_sms: int, w8a8: bool = False) -> QuantTiles:
    block_m, block_n, block_k, waves, num_warps, num_stages, *extra = spec
    accumulators, max_registers = (*extra, *(1, 0)[len(extra) :])  # the fields' defaults where left out
    if kind == "int4":
        block_k = 128 if block_m > 1 else max(128, block_k)  # whole planes blocks (quant_kernels.INT4_BLOCK_K)
    tiles_m = 1 if block_m == 1 else -(-m // block_m)
    split = split_for(n, k, block_n, block_k, tiles_m, waves, num_sms)
    return QuantTiles(block_m, block_n, block_k, split, num_warps, num_stages, w8a8=w8a8,
                      accumulators=accumulators, max_registers=max_registers)  # fmt: skip


def candidates(
    kind: str, m: int, n: int, k: int, num_sms: int, w8a8: bool = False, gluon: bool = False
) -> list[QuantTiles]:
    """Distinct launch shapes worth timing for this call (the sweep's search space): the tensor-core
    program's tiles of the row bucket, at M = 1 also the CUDA-core GEMVs, for fp8 and int8 the
    W8A8 kinds (our e4m3 x e4m3 or int8 x int8 program; `_scaled_mm` / `_int_mm` above 16 rows) when
    `w8a8` allows them, and for int4 from 17 rows up to 256 the Gluon kernel's when `gluon` (sm_90)."""
    bucket = row_bucket(m)
    if kind == "bf16" and bucket > DENSE_MAX_ROWS:
        return [TORCH]
    specs = _specs(kind, bucket)
    if m == 1:
        gemvs = GEMVS["int4"] if kind == "int4" else GEMVS["bytes"] + GEMVS.get(kind, [])
        specs = specs + [s for s in gemvs if k >= s[2]]
    found = [_make(kind, m, n, k, s, num_sms) for s in specs]
    if kind == "bf16":
        found.append(TORCH)  # cuBLAS: the table keeps ours only where it measured faster
    elif bucket >= 128:
        found.append(DEQUANT)
    if gluon and kind == "int4" and 16 < m <= 256:
        found += gluon_candidates(m, n, k, num_sms)
    if w8a8 and kind in ANY_KINDS:
        found += [_make(kind, m, n, k, s, num_sms, w8a8=True) for s in _specs(kind, bucket, w8a8=True)]
        if m >= INT_MM_MIN_ROWS:  # cuBLAS's fp8 / int8 GEMMs
            found.append(SCALED_MM if kind == "fp8" else INT_MM)
    return list(dict.fromkeys(found))


def program_tiles(kind: str, m: int, n: int, k: int, num_sms: int) -> QuantTiles:
    """The default rule's tiles of our Triton program for m rows: the row bucket's first tensor-core
    candidate (block_m grows with the rows, up to 128; what a capture takes where neither the table
    nor the scratch buffer helps, so it must stay sane at large M: benchmarks/quant_kernels.py --sweep
    prints it beside the fastest)."""
    return _make(kind, m, n, k, _specs(kind, row_bucket(m))[0], num_sms)


def default_tiles(
    kind: str, m: int, n: int, k: int, num_sms: int, w8a8: bool = False, graph_safe: bool = False
) -> QuantTiles:
    """The rule for shapes without a measurement: tensor-core tiles split to ~2 waves for decode batches;
    above 256 rows (prefill) the weight widened once and a dense matmul, whose cost is predictable: the
    dense matmul's plus one pass over the weight; with quantized activations allowed, cuBLAS's fp8 or
    int8 GEMM (`_scaled_mm`, `_int_mm`: on the H200 at 512 rows `_int_mm` beat the widened weight on
    each of Llama-3.1-8B's linears; README), from W8A8_MIN_BUCKET rows on;
    int4 at 17-256 rows: the Gluon kernel (gluon_default; our program where it cannot run).
    `graph_safe`: never "dequant" (a CUDA-graph capture without the scratch buffer): the launches above."""
    bucket = row_bucket(m)
    if kind == "bf16":
        return TORCH  # never ours without a measurement that it wins
    if w8a8 and kind in ANY_KINDS and bucket >= W8A8_MIN_BUCKET:
        return SCALED_MM if kind == "fp8" else INT_MM
    if bucket > 256 and not graph_safe:
        return DEQUANT
    return (kind == "int4" and gluon_default(m, n, k, num_sms)) or program_tiles(kind, m, n, k, num_sms)


def table_key(kind: str, m: int, n: int, k: int) -> str:
    return f"{kind}:{row_bucket(m)}:{n}:{k}"


def _read_entries(path: str | Path, section: dict) -> dict[str, QuantTiles]:
    fields = {f.name for f in dataclasses.fields(QuantTiles)}
    entries = {}
    for key, entry in section.items():
        extra = set(entry) - fields
        if extra:
            raise ValueError(f"{path}: entry {key} has unknown fields {sorted(extra)}; known: {sorted(fields)}")
        entries[key] = QuantTiles(**entry)
    return entries


def read_table(path: str | Path) -> dict:
    """A sweep table: {"gpu": name, "version": TABLE_VERSION, "entries": {table_key: QuantTiles fields},
    "capture": {table_key: QuantTiles fields}, "also": {GPU name: [table formats it applies to there]}};
    ValueError if malformed. "version" is None for tables of before the field (version 1); "capture"
    ({} when absent: tables of before it) holds, for the entries that are "dequant", the fastest launch
    a CUDA-graph capture can take."""
    data = json.loads(Path(path).read_text())
    if not isinstance(data, dict) or not isinstance(data.get("entries"), dict) or "gpu" not in data:
        raise ValueError(f"{path}: a tile table needs 'gpu' and 'entries' (written by quant_kernels.py --sweep)")
    also = data.get("also", {})
    if not isinstance(also, dict) or not all(
        isinstance(kinds, list) and all(isinstance(kind, str) for kind in kinds) for kinds in also.values()
    ):
        raise ValueError(f"{path}: 'also' must map GPU names to lists of table formats (int4, fp8, fp8a, ...)")
    version = data.get("version")
    if version != TABLE_VERSION:
        return {"gpu": data["gpu"], "also": also, "version": version, "entries": {}, "capture": {}}
    capture = _read_entries(path, data.get("capture") or {})
    unsafe = sorted(key for key, tiles in capture.items() if not tiles.graph_safe)
    if unsafe:
        raise ValueError(f"{path}: 'capture' entries must be launches a CUDA graph can take, got dequant at {unsafe}")
    entries = _read_entries(path, data["entries"])
    return {"gpu": data["gpu"], "also": also, "version": version, "entries": entries, "capture": capture}


def table_json(
    gpu: str,
    entries: dict[str, QuantTiles],
    timings: dict[str, float] | None = None,
    capture: dict[str, QuantTiles] | None = None,
    capture_timings: dict[str, float] | None = None,
) -> dict:
    """The JSON of a table; `timings` (table_key -> us of the entry) are kept beside it for readers,
    `capture_timings` beside `capture`."""
    out = {"gpu": gpu, "version": TABLE_VERSION, "entries": {key: asdict(t) for key, t in sorted(entries.items())}}
    if capture:
        out["capture"] = {key: asdict(t) for key, t in sorted(capture.items())}
    for name, times in (("us", timings), ("capture_us", capture_timings)):
        if times:
            out[name] = {key: round(times[key], 2) for key in sorted(times)}
    return out


@functools.cache
def _table_for(gpu: str) -> dict[str, dict[str, QuantTiles]]:
    """{"entries": ..., "capture": ...} of the table for this GPU name, read once; empty when there is
    none, it is for another GPU (neither its "gpu" nor in its "also"; there only the formats listed) or it
    was measured on other kernels (another version)."""
    path = os.environ.get(TABLE_ENV) or (PACKAGED_TABLE if PACKAGED_TABLE.exists() else None)
    if not path:
        return {"entries": {}, "capture": {}}
    table = read_table(path)
    if gpu != table["gpu"] and gpu not in table["also"]:
        logger.info("quantized-matmul tiles: %s has no table measured on it (%s is %s's); the default rule",
                    gpu, path, table["gpu"])  # fmt: skip
        return {"entries": {}, "capture": {}}
    if table["version"] != TABLE_VERSION:
        logger.info("quantized-matmul tiles: %s is version %s, not %s; default tiles", path, table["version"],
                    TABLE_VERSION)  # fmt: skip
        return {"entries": {}, "capture": {}}
    if gpu == table["gpu"]:
        return {"entries": table["entries"], "capture": table["capture"]}
    kinds = set(table["also"][gpu])
    logger.info("quantized-matmul tiles: %s's table for %s on %s", table["gpu"], ", ".join(sorted(kinds)), gpu)
    return {
        part: {key: tiles for key, tiles in table[part].items() if key.split(":", 1)[0] in kinds}
        for part in ("entries", "capture")
    }


def lookup(gpu: str, kind: str, m: int, n: int, k: int, graph_safe: bool = False) -> QuantTiles | None:
    """The measured tiles for this call on this GPU, if the table has them; `graph_safe`: a launch a
    CUDA-graph capture can take (the entry's "capture" alternative where the entry is "dequant")."""
    table, key = _table_for(gpu), table_key(kind, m, n, k)
    tiles = table["entries"].get(key)
    if graph_safe and tiles is not None and not tiles.graph_safe:
        return table["capture"].get(key)
    return tiles
