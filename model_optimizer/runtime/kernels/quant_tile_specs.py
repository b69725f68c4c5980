"""The launch shapes the quantized matmul's sweep times (quant_tiles.candidates) and the default rule picks
from (quant_tiles.program_tiles, gluon_default), per kernel and row bucket, with why each is there.

Plain tuples, read by quant_tiles into QuantTiles; a table entry (quant_tiles.json) names whichever won.
"""

# (block_m, block_n, block_k, waves, num_warps, num_stages[, accumulators[, max_registers]]). waves x SMs is the number of programs
# split-K aims at (0: no split): at decode the tiles of one weight are few, and several programs per
# SM hide the latency of each one's loads. Chosen from the sm_90 SASS of each shape (registers
# without spills, benchmarks/quant_sass.py) and the sweeps: the table measures which wins.
_ASYNC_32_TOKENS = [(32, 128, 128, 2, 4, 3, 4), (32, 128, 128, 4, 4, 3, 4), (32, 256, 128, 2, 8, 3, 4)]
"""Tiles of 32 tokens with an accumulator per plane, aiming at two or four programs an SM: candidates at
32 rows and, as two row tiles, at 64."""
INT4_MMA = {  # block_k: one 128-column planes block per iteration. A warp group must own 128 weight
    # rows (block_n 128 at 4 warps, 256 at 8): with 64 the compiler sends each plane through shared memory.
    # A 7th field of 4: an accumulator per plane (QuantTiles.accumulators); they cost registers, so only
    # block_m <= 32 compiles on sm_90 without spills and with the MMAs left asynchronous by ptxas
    16: [
        (16, 128, 128, 2, 4, 4),
        (16, 128, 128, 4, 4, 4),
        (16, 128, 128, 8, 4, 3),
        # just under two programs an SM (split 8 for N = 4096, 2 for gate_up): faster than the splits
        # above at one row on Llama's down_proj (scripts/device/int4_b1_probe.py --splits; README)
        (16, 128, 128, 1.9, 4, 3),
        (16, 128, 128, 4, 4, 5),
        (16, 256, 128, 2, 8, 4),
        (16, 256, 128, 4, 8, 3),
        (16, 128, 128, 1.9, 4, 3, 4),
        (16, 128, 128, 4, 4, 3, 4),
        (16, 256, 128, 2, 8, 3, 4),
        # 2 warps (1: a warp alone): Ampere's mma.sync from registers, no warp group, so no barrier
        # between a plane's MMAs and the next plane's widening; at block_n 64 ~96 registers a thread,
        # up to ten programs an SM to hide each one's loads (the warp-group tiles above fit four)
        (16, 64, 128, 1.9, 2, 3),
        (16, 64, 128, 4, 2, 3),
        (16, 64, 128, 8, 2, 4),
        (16, 128, 128, 2, 2, 3),
        (16, 128, 128, 4, 2, 3),
        (16, 64, 128, 4, 1, 3),
    ],
    32: [
        (32, 128, 128, 2, 4, 4),
        (32, 128, 128, 4, 4, 3),
        (32, 256, 128, 2, 8, 3),
        (16, 128, 128, 4, 4, 4),
        *_ASYNC_32_TOKENS,
        (16, 64, 128, 4, 2, 3),
        (16, 128, 128, 4, 2, 3),
    ],
    64: [
        (64, 128, 128, 2, 4, 3),
        (64, 128, 128, 4, 4, 2),
        (64, 256, 128, 2, 8, 3),
        (32, 128, 128, 4, 4, 3),
        *_ASYNC_32_TOKENS,
    ],
    128: [
        (64, 128, 128, 2, 4, 3),
        (64, 256, 128, 1, 8, 3),
        (128, 256, 128, 1, 8, 3),
        (32, 128, 128, 2, 4, 3),
        (32, 128, 128, 1, 4, 3, 4),
        (32, 128, 128, 2, 4, 3, 4),
        (32, 256, 128, 1, 8, 3, 4),
    ],
    256: [
        (64, 256, 128, 1, 8, 3),
        (128, 256, 128, 1, 8, 3),
        (64, 128, 128, 1, 4, 3),
        (32, 128, 128, 1, 4, 3, 4),
        (32, 256, 128, 1, 8, 3, 4),
        (32, 256, 128, 0, 8, 4, 4),
    ],
    512: [(64, 256, 128, 0, 8, 3), (128, 256, 128, 0, 8, 3), (32, 256, 128, 0, 8, 3, 4)],
}
BYTES_MMA = {  # int8 / e4m3 widened in registers: block_n x block_k bytes a warp group without spills
    16: [
        (16, 128, 128, 2, 4, 4),
        (16, 128, 128, 4, 4, 3),
        (16, 64, 256, 4, 4, 4),
        (16, 256, 128, 2, 8, 3),
        (16, 64, 128, 8, 4, 4),
        (16, 64, 256, 2, 4, 3),
    ],
    32: [(32, 128, 128, 2, 4, 3), (32, 128, 128, 4, 4, 3), (32, 64, 256, 4, 4, 3), (16, 128, 128, 4, 4, 3)],
    64: [(64, 128, 128, 2, 4, 3), (64, 64, 256, 4, 4, 3), (32, 128, 128, 2, 4, 3)],
    128: [(64, 128, 128, 2, 4, 3), (128, 128, 128, 1, 8, 3), (32, 128, 128, 2, 4, 3)],
    256: [(128, 128, 128, 1, 8, 3), (64, 128, 128, 1, 4, 3), (128, 256, 64, 0, 8, 3)],
    512: [(128, 128, 128, 0, 8, 3), (128, 256, 64, 0, 8, 3)],
}
W8A8_MMA = {  # e4m3 x e4m3 or int8 x int8: nothing widened, larger K tiles
    16: [(16, 128, 256, 2, 4, 4), (16, 64, 256, 4, 4, 4), (16, 128, 128, 4, 4, 5), (16, 256, 128, 2, 8, 4)],
    32: [(32, 128, 256, 2, 4, 4), (32, 64, 256, 4, 4, 4)],
    64: [(64, 128, 256, 2, 4, 3), (64, 128, 128, 2, 4, 4), (64, 64, 256, 1, 4, 4)],
    # from 128 rows also 64 weight rows a program and every token in it: more programs for the skinny N
    # of qkv / o / down, and split K to just under one wave of the SMs (0.9: Llama's N = 4096 splits in
    # two), not two as for decode, where the partials of M x N would cost more than idle SMs
    128: [
        (128, 128, 128, 1, 8, 4),
        (128, 128, 256, 1, 8, 3),
        (128, 64, 128, 0, 4, 4),
        (128, 64, 256, 0, 4, 3),
        (128, 64, 256, 0.9, 8, 3),
    ],
    256: [
        (128, 256, 128, 0, 8, 3),
        (128, 128, 128, 1, 8, 4),
        (256, 64, 128, 0, 8, 3),
        (256, 64, 128, 0, 4, 3),
        (256, 128, 128, 0, 8, 3),
        (256, 64, 128, 0.9, 8, 4),
        (256, 64, 256, 0.9, 8, 2),
    ],
    512: [(128, 256, 128, 0, 8, 3), (128, 128, 256, 0, 8, 3)],
}
GEMVS = {  # one row on CUDA cores: no pipelining, so the tile of one iteration is what is in flight
    "bytes": [  # stages 2: the next tile prefetched into registers (quant_matmul.prefetches), 1: not
        (1, 32, 256, 4, 4, 2),
        (1, 64, 256, 4, 8, 1),
        (1, 32, 512, 4, 4, 1),
        (1, 16, 256, 8, 4, 2),
    ],
    "int8": [  # int8 only, beside "bytes": the 16-row tile under a cap of 72 registers (8th field,
        # QuantTiles.max_registers), without spills on sm_90 (e4m3's widening spills there): seven programs
        # an SM instead of five. Llama-3.1-8B's gate_up at one row on an H100: 40.6 against 42.8 us
        # (scripts/device/register_cap_probe.py; README)
        (1, 16, 256, 8, 4, 2, 1, 72),
    ],
    "int4": [  # more rows a thread (larger block_n a warp) reuse each activation load more often
        (1, 64, 256, 4, 4, 1),
        (1, 64, 256, 4, 4, 2),
        (1, 128, 256, 2, 4, 2),
        (1, 32, 1024, 4, 8, 1),
    ],
}


INT4_GLUON = [  # (block_m tokens, block_n weight rows, num_warps, stages): each compiles for sm_90 without
    # spills, with and without split-K (benchmarks/int4_gluon.py --compile-only)
    (16, 64, 4, 4), (16, 128, 8, 4), (32, 64, 4, 4), (32, 128, 4, 4), (64, 64, 4, 3), (64, 128, 4, 3),
    (64, 128, 8, 3), (64, 256, 8, 3), (128, 64, 4, 3), (128, 128, 8, 3), (128, 128, 8, 4), (128, 256, 8, 3),
    (256, 64, 4, 3), (256, 128, 8, 3),
]  # fmt: skip


GLUON_DEFAULT = {(32, 64): (4, 4), (32, 128): (4, 4), (64, 64): (4, 3), (128, 64): (4, 3), (128, 128): (8, 3),
                  (128, 256): (8, 3), (256, 128): (8, 3)}  # fmt: skip
"""(block_m, block_n) -> (num_warps, stages) of the default rule's Gluon launch (gluon_default)."""
