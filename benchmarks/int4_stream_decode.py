"""Experiment: a balanced ("stream-K") launch of the int4 tensor-core program for decode rows (M <= 16).

The packaged launch (`quant_matmul`: one program per (output tile, K split)) leaves Llama-3.1-8B's
gate_up at one row with 2.12 waves of short programs on an H200: each program's cp.async pipeline
fills and drains over its ~6 128-column blocks, and the ragged last wave leaves SMs idle (README,
"Where a batch-1 int4 step goes"). Here a fixed number of programs (SMs x programs an SM) each take an
equal contiguous share of all (output tile, 128-column block) work units in tile-major order, in ONE
flat loop, so Triton's software pipeline keeps weight loads in flight across tile boundaries and every
program ends within a block of the others.

A tile's sum leaves a program when the tile ends (inside the loop) or when the share does (after it):
- a tile the program covered whole is written to the output directly;
- a tile shared by several programs (only a program's first and last tile can be) goes through float32
  partials of the M valid rows, two slots a program (its first tile's, its last tile's). Each sharer
  counts itself in with an atomic on the tile's counter; the last one adds the sharers' partials in
  program order (the same bits on every run, whoever comes last) and resets the counter to zero, so the
  next launch (a CUDA-graph replay included) starts from zeroed counters, as quant_matmul's split-K does.

Weights in the planes packing (quant_reference.repack_int4), groups of a multiple of 128 columns; the
block's arithmetic is quant_kernels' (`int4_plane`, `_x_cols`, `_int4_group`, `dot`): swap AB, the
weight tile the MMA's register operand, four 32-column plane dots a block.

    PYTHONPATH=. python3 benchmarks/int4_stream_timing.py --compile-only        # sm_90, no GPU needed
    PYTHONPATH=. python3 benchmarks/int4_stream_timing.py --output int4_stream.json   # GPU: time every variant
    PYTHONPATH=. python3 benchmarks/int4_stream_timing.py --check --output check.json  # GPU: correctness only

Not used by the engine; scripts/device/int4_stream_h200.sh runs all three on an H100/H200.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path

import torch
import triton
import triton.language as tl

from model_optimizer.runtime.kernels import pdl
from model_optimizer.runtime.kernels.counters import Counters
from model_optimizer.runtime.kernels.dots import dot
from model_optimizer.runtime.kernels.quant_dequant import int4_plane
from model_optimizer.runtime.kernels.quant_kernels import INT4_BLOCK_K, _int4_group, _x_cols
from model_optimizer.runtime.kernels.quant_matmul import _dot_dtype, _use_asm

MAX_ROWS = 16
"""Rows one launch serves: the MMA's 16-column x tile (swap AB); more rows are prefill's business."""


@dataclass(frozen=True)
class StreamVariant:
    """One compiled form of the balanced launch (the program count is a launch argument, not a compile)."""

    block_n: int
    """Weight rows (output columns) of a tile: 64 or 128 (wgmma needs 64 rows a warp group)."""
    num_warps: int
    """4: Hopper's warp-group MMA (wgmma); 1-2: the older mma.sync, smaller programs, more of them an SM."""
    accs: int = 1
    """1: one accumulator; 4: one per plane, summed when the tile's sum leaves (quant_kernels' ACCS)."""
    num_stages: int = 3
    """Triton's pipeline depth over the flat loop (blocks in flight a program)."""

    @property
    def name(self) -> str:
        return f"n{self.block_n}w{self.num_warps}a{self.accs}s{self.num_stages}"


VARIANTS = (
    StreamVariant(128, 4, 1, 3),  # the table's decode tile, balanced
    StreamVariant(128, 4, 4, 3),
    StreamVariant(128, 4, 1, 4),
    StreamVariant(64, 4, 1, 3),
    StreamVariant(64, 4, 4, 3),
    StreamVariant(64, 2, 1, 3),  # mma.sync: the table's 64-row tile
    StreamVariant(64, 2, 4, 4),
    StreamVariant(64, 1, 1, 4),
)
PROGRAMS_PER_SM = (2, 3, 4, 6, 8)
"""Program counts tried per variant (x the SM count), each only where that many fit an SM at once."""

_counters = Counters(4096)
"""Per-tile counters of this launch (kept apart from quant_matmul's)."""


@triton.jit
def _store_tile(out_ptr, acc, tile, offs_m, M, stride_om, BLOCK_N: tl.constexpr):
    """acc (BLOCK_N, BLOCK_M) float32 = out.T of one tile, rows past M left out, rounded to out's dtype."""
    offs_n = tile * BLOCK_N + tl.arange(0, BLOCK_N)
    out_offs = offs_m.to(tl.int64)[None, :] * stride_om + offs_n[:, None]
    tl.store(out_ptr + out_offs, acc.to(out_ptr.dtype.element_ty), mask=offs_m[None, :] < M)


@triton.jit
def _part_offsets(slot, offs_m, M, BLOCK_N: tl.constexpr):
    """Offsets of partial slot `slot` (2 x program + 0 for its first tile, + 1 for its last): M rows of BLOCK_N."""
    return (slot * M + offs_m[None, :]) * BLOCK_N + tl.arange(0, BLOCK_N)[:, None]


@triton.jit
def _finish_tile(out_ptr, part_ptr, count_ptr, tile, offs_m, M, stride_om, num_units, blocks, num_programs,
                 BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):  # fmt: skip
    """Count this program in on a shared tile (its partial already stored); the last sharer adds every
    sharer's partial in program order, writes the tile and zeroes its counter for the next launch."""
    p_first = ((tile * blocks + 1) * num_programs - 1) // num_units  # the program holding the tile's first block
    p_last = ((tile + 1) * blocks * num_programs - 1) // num_units  # ... and its last
    counter = count_ptr + tile
    if tl.atomic_add(counter, 1, sem="acq_rel") == p_last - p_first:
        acc = tl.zeros((BLOCK_N, BLOCK_M), dtype=tl.float32)
        for q in range(p_first, p_last + 1):
            head = (q * num_units // num_programs) // blocks == tile  # the tile is q's first: its slot 0
            slot = 2 * q + 1 - head.to(tl.int32)
            part = tl.load(part_ptr + _part_offsets(slot, offs_m, M, BLOCK_N), mask=offs_m[None, :] < M, other=0,
                           cache_modifier=".cg")  # fmt: skip
            acc += part
        _store_tile(out_ptr, acc, tile, offs_m, M, stride_om, BLOCK_N)
        tl.atomic_xchg(counter, 0)  # ready for the next launch (CUDA-graph replays included)


@triton.jit
def _block_dots(x_ptr, w_ptr, offs_n, kb, zero, scale, acc, acc1, acc2, acc3, offs_m, M, K, stride_xm, stride_wn,
                DOT_DTYPE: tl.constexpr, USE_ASM: tl.constexpr, ACCS: tl.constexpr):  # fmt: skip
    """Block kb (columns 128 kb ...) of the tile at weight rows offs_n, added into the accumulators: its four
    planes widened (quant_dequant.int4_plane) and each multiplied by its 32 columns of x (quant_kernels)."""
    X_DTYPE: tl.constexpr = x_ptr.dtype.element_ty
    lane = tl.arange(0, 32)
    k0 = tl.multiple_of(kb * 128, 128)
    lanes = tl.load(w_ptr + offs_n.to(tl.int64)[:, None] * stride_wn + (k0 // 4 + lane)[None, :])  # (BLOCK_N, 32)
    for p in tl.static_range(4):
        w = int4_plane(lanes, zero, scale, p, X_DTYPE, DOT_DTYPE, USE_ASM)  # columns k0 + 32 p + lane
        x = _x_cols(x_ptr, offs_m, k0 + 32 * p + lane, M, K, stride_xm, True).to(DOT_DTYPE)  # (32, BLOCK_M)
        if ACCS == 1 or p == 0:
            acc = dot(w, x, acc, DOT_DTYPE)
        elif p == 1:
            acc1 = dot(w, x, acc1, DOT_DTYPE)
        elif p == 2:
            acc2 = dot(w, x, acc2, DOT_DTYPE)
        else:
            acc3 = dot(w, x, acc3, DOT_DTYPE)
    return acc, acc1, acc2, acc3


@triton.jit
def _end_share(out_ptr, part_ptr, count_ptr, acc, pid, start, end, offs_m, M, stride_om, num_units, blocks,
               num_programs, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):  # fmt: skip
    """After the loop: the last tile's sum (acc) to the output, or to the program's partial slot if the tile is
    shared; then the program counts itself in on each shared tile it touched (its first and last)."""
    first_tile = start // blocks
    last_tile = (end - 1) // blocks
    last_shared = (last_tile * blocks < start) | ((last_tile + 1) * blocks > end)
    if last_shared:
        slot = 2 * pid + (last_tile != first_tile).to(tl.int32)
        tl.store(part_ptr + _part_offsets(slot, offs_m, M, BLOCK_N), acc, mask=offs_m[None, :] < M)
    else:
        _store_tile(out_ptr, acc, last_tile, offs_m, M, stride_om, BLOCK_N)
    tl.debug_barrier()  # every thread's partials are stored before this program counts itself in
    if (first_tile * blocks < start) | ((first_tile + 1) * blocks > end):
        _finish_tile(out_ptr, part_ptr, count_ptr, first_tile, offs_m, M, stride_om, num_units, blocks, num_programs,
                     BLOCK_M, BLOCK_N)  # fmt: skip
    if (last_tile != first_tile) & last_shared:
        _finish_tile(out_ptr, part_ptr, count_ptr, last_tile, offs_m, M, stride_om, num_units, blocks, num_programs,
                     BLOCK_M, BLOCK_N)  # fmt: skip


@triton.jit(do_not_specialize=["M", "K", "num_units", "blocks", "num_programs"])
def _stream_int4_kernel(x_ptr, w_ptr, scales_ptr, zeros_ptr, out_ptr, part_ptr, count_ptr, M, K, stride_xm,
                        stride_wn, stride_sn, stride_zn, stride_om, num_units, blocks, num_programs,
                        GROUP: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, DOT_DTYPE: tl.constexpr,
                        USE_ASM: tl.constexpr, ACCS: tl.constexpr, PDL: tl.constexpr):  # fmt: skip
    """out (M, N) = x (M, K) @ W.T; unit u is block u % blocks of output tile u // blocks (blocks = K / 128),
    and this program works on units [pid * num_units // num_programs, (pid + 1) * ...) in one loop."""
    pdl.wait_then_release(PDL)
    pid = tl.program_id(0)
    start = pid * num_units // num_programs
    end = (pid + 1) * num_units // num_programs
    offs_m = tl.arange(0, BLOCK_M)
    rows = tl.arange(0, BLOCK_N)
    every_row = tl.full((BLOCK_N,), 1, tl.int1)  # N is a multiple of BLOCK_N
    acc = tl.zeros((BLOCK_N, BLOCK_M), dtype=tl.float32)
    acc1 = tl.zeros((BLOCK_N, BLOCK_M), dtype=tl.float32)  # planes 1-3 with ACCS 4 (dropped with 1)
    acc2 = tl.zeros((BLOCK_N, BLOCK_M), dtype=tl.float32)
    acc3 = tl.zeros((BLOCK_N, BLOCK_M), dtype=tl.float32)
    tile, kb = start // blocks, start % blocks  # the unit's tile and block, carried (no division a unit)
    # zero points and scales are too small for cp.async: loaded one unit ahead by hand (as _dot_int4 does);
    # none past the share (k_end 0)
    next_zero, next_scale = _int4_group(scales_ptr, zeros_ptr, tile * BLOCK_N + rows, every_row, kb * 128, K,
                                        stride_sn, stride_zn, GROUP)  # fmt: skip
    for u in range(start, end):
        zero, scale = next_zero, next_scale
        tile_ends = kb == blocks - 1
        next_tile = tile + tile_ends.to(tl.int32)
        next_kb = tl.where(tile_ends, 0, kb + 1)
        next_zero, next_scale = _int4_group(scales_ptr, zeros_ptr, next_tile * BLOCK_N + rows, every_row,
                                            next_kb * 128, tl.where(u + 1 < end, K, 0), stride_sn, stride_zn,
                                            GROUP)  # fmt: skip
        acc, acc1, acc2, acc3 = _block_dots(x_ptr, w_ptr, tile * BLOCK_N + rows, kb, zero, scale, acc, acc1, acc2,
                                            acc3, offs_m, M, K, stride_xm, stride_wn, DOT_DTYPE, USE_ASM, ACCS)  # fmt: skip
        if tile_ends & (u + 1 < end):  # a tile ends inside the share: its sum leaves
            if ACCS == 4:
                acc = (acc + acc1) + (acc2 + acc3)
            if tile * blocks >= start:  # covered whole
                _store_tile(out_ptr, acc, tile, offs_m, M, stride_om, BLOCK_N)
            else:  # only the first tile can have started before the share
                tl.store(part_ptr + _part_offsets(2 * pid, offs_m, M, BLOCK_N), acc, mask=offs_m[None, :] < M)
            acc = tl.zeros((BLOCK_N, BLOCK_M), dtype=tl.float32)
            acc1 = tl.zeros((BLOCK_N, BLOCK_M), dtype=tl.float32)
            acc2 = tl.zeros((BLOCK_N, BLOCK_M), dtype=tl.float32)
            acc3 = tl.zeros((BLOCK_N, BLOCK_M), dtype=tl.float32)
        tile, kb = next_tile, next_kb
    if ACCS == 4:
        acc = (acc + acc1) + (acc2 + acc3)
    _end_share(out_ptr, part_ptr, count_ptr, acc, pid, start, end, offs_m, M, stride_om, num_units, blocks,
               num_programs, BLOCK_M, BLOCK_N)  # fmt: skip


def _check(x: torch.Tensor, planes: torch.Tensor, scales: torch.Tensor, group_size: int, block_n: int) -> None:
    m, k = x.shape
    n = planes.shape[0]
    if not 1 <= m <= MAX_ROWS:
        raise ValueError(f"the balanced int4 launch serves 1 to {MAX_ROWS} rows, got {m}")
    if k % INT4_BLOCK_K or group_size % INT4_BLOCK_K or k % group_size or planes.shape[1] * 8 != k:
        raise ValueError(
            f"K and the group size must be multiples of {INT4_BLOCK_K} (K of the group size, the weight K / 8 "
            f"int32 a row), got K {k}, group {group_size}, weight {tuple(planes.shape)}"
        )
    if n % block_n:
        raise ValueError(f"N must be a multiple of the tile's {block_n} rows, got {n}")
    if scales.dtype != x.dtype:
        raise ValueError(f"scales must be in the activations' dtype {x.dtype}, got {scales.dtype}")


def launch(
    x: torch.Tensor,
    planes: torch.Tensor,
    scales: torch.Tensor,
    zeros: torch.Tensor,
    group_size: int,
    variant: StreamVariant,
    num_programs: int,
) -> tuple[torch.Tensor, object]:
    """(x (M, K) @ dequantized W (N, K).T in x's dtype, the compiled kernel): `planes` int32 (N, K // 8) in
    the planes packing, scales (N, K // G) in x's dtype, zeros uint8 (N, K // G). `num_programs` is capped
    at the work units (tiles x 128-column blocks), so that every program has one at least."""
    _check(x, planes, scales, group_size, variant.block_n)
    m, k = x.shape
    n = planes.shape[0]
    blocks, tiles = k // INT4_BLOCK_K, n // variant.block_n
    num_units = tiles * blocks
    programs = max(1, min(num_programs, num_units))
    if num_units * (programs + 1) >= 2**31:  # the kernel's share arithmetic is int32
        raise ValueError(f"{num_units} work units x {programs} programs overflow the kernel's int32 arithmetic")
    counters = _counters.get(x.device, tiles)
    if counters is None:
        raise RuntimeError("the per-tile counters must exist before a CUDA-graph capture: launch once outside it")
    x = x if x.stride(-1) == 1 else x.contiguous()
    lanes = planes.contiguous().view(torch.int16)  # the tensor-core program reads 16-bit lanes
    scales, zeros = scales.contiguous(), zeros.contiguous()
    out = torch.empty(m, n, dtype=x.dtype, device=x.device)
    partials = torch.empty(2 * programs * m * variant.block_n, dtype=torch.float32, device=x.device)
    kernel = _stream_int4_kernel[(programs,)](
        x, lanes, scales, zeros, out, partials, counters, m, k, x.stride(0), lanes.stride(0), scales.stride(0),
        zeros.stride(0), out.stride(0), num_units, blocks, programs, GROUP=group_size, BLOCK_M=MAX_ROWS,
        BLOCK_N=variant.block_n, DOT_DTYPE=_dot_dtype(x.dtype), USE_ASM=_use_asm(x), ACCS=variant.accs,
        num_warps=variant.num_warps, num_stages=variant.num_stages, **pdl.options(x),
    )  # fmt: skip
    return out, kernel


def stream_int4(
    x: torch.Tensor,
    planes: torch.Tensor,
    scales: torch.Tensor,
    zeros: torch.Tensor,
    group_size: int,
    variant: StreamVariant,
    num_programs: int,
) -> torch.Tensor:
    """The balanced launch's product (`launch` without the compiled kernel)."""
    return launch(x, planes, scales, zeros, group_size, variant, num_programs)[0]


def programs_that_fit(registers: int, shared_bytes: int, num_warps: int) -> int:
    """Programs of this size resident on one Hopper SM at once: 64K registers (allocated 256 a warp at a
    time), 228 KB of shared memory (1 KB reserved a block), 64 warps, 32 blocks."""
    warp_registers = -(-max(registers, 1) * 32 // 256) * 256
    by_registers = (65536 // warp_registers) // num_warps
    by_shared = (228 * 1024) // (shared_bytes + 1024)
    return max(0, min(by_registers, by_shared, 64 // num_warps, 32))


def compile_facts(variant: StreamVariant) -> dict:
    """The variant compiled for sm_90 without a GPU (bf16, PTX widening, PDL as on an H200): registers,
    spills, shared memory, programs an SM, and its main loop (instructions, cp.async copies, MMAs; the loop's
    static length includes the tile-end branch, which runs once a tile)."""
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "runtime" / "kernels"))
    from compile_sm90 import compile_kernel, disassemble, main_loop  # the tests' sm_90 compile helpers

    pointers = {"x_ptr": "*bf16", "w_ptr": "*i16", "scales_ptr": "*bf16", "zeros_ptr": "*u8", "out_ptr": "*bf16",
                "part_ptr": "*fp32", "count_ptr": "*i32"}  # fmt: skip
    constexprs = {"GROUP": 128, "BLOCK_M": MAX_ROWS, "BLOCK_N": variant.block_n, "DOT_DTYPE": tl.bfloat16,
                  "USE_ASM": True, "ACCS": variant.accs, "PDL": True}  # fmt: skip
    kernel = compile_kernel(_stream_int4_kernel, pointers, constexprs, num_stages=variant.num_stages,
                            num_warps=variant.num_warps, quiet=True)  # fmt: skip
    sass, registers = disassemble(kernel.asm["cubin"])
    loop = [op.split(".")[0] for op in main_loop(sass)]
    shared = kernel.metadata.shared
    return {
        "registers": registers,
        "spills": sass.count("LDL") + sass.count("STL"),
        "shared_bytes": shared,
        "programs_per_sm": programs_that_fit(registers, shared, variant.num_warps),
        "loop_instructions": len(loop),
        "loop_cp_async": loop.count("LDGSTS"),
        "loop_mma": {op: loop.count(op) for op in ("HGMMA", "HMMA") if op in loop},
    }


def table_tiles() -> list:
    """The distinct int4 tensor-core launches of the packaged tile table at 1-16 rows (quant_tiles.json)."""
    from model_optimizer.runtime.kernels.quant_tiles import PACKAGED_TABLE, read_table

    entries = read_table(PACKAGED_TABLE)["entries"]
    found = {}
    for key, tiles in sorted(entries.items()):
        kind, bucket = key.split(":")[:2]
        if kind == "int4" and int(bucket) <= MAX_ROWS and tiles.kernel == "mma":
            found.setdefault((*tiles.compile_key, tiles.split_k == 1), tiles)
    return list(found.values())


def table_facts(tiles: object) -> dict:
    """quant_sass's sm_90 facts of one packaged launch, in compile_facts' terms."""
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from quant_sass import measure

    facts = measure("int4", tiles)
    return {
        "registers": facts["registers"],
        "spills": facts["spills"],
        "shared_bytes": facts["shared_bytes"],
        "programs_per_sm": programs_that_fit(facts["registers"], facts["shared_bytes"], tiles.num_warps),
        "loop_instructions": facts["loop_instructions"],
        "loop_mma": facts["tensor_core"],
    }
