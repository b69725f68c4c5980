"""Quantized linear kernels against the float64 product with the dequantized weight, through the
Triton interpreter on the CPU; and the torch references against the layouts' formulas.

Small odd shapes (rows and columns that fill no tile exactly), fresh random inputs per case. Bounds
on ||out - ref|| / ||ref||: the kernels accumulate in float32 and round once to the output dtype.
"""

import json
import logging

import pytest
import torch

from model_optimizer.runtime.kernels import quant_reference as ref
from model_optimizer.runtime.kernels.quant_linear import fp8_linear, w4a16_linear, w8a16_linear
from model_optimizer.runtime.kernels.quant_matmul import (
    INT_MM_MIN_ROWS,
    MAX_SPLIT_K,
    QuantTiles,
    choose_tiles,
    int_mm_w8a8,
    quant_matmul,
    quantize_rows_fp8,
    quantize_rows_int8,
)
from model_optimizer.runtime.layers.quantization.quantizers import quantize_fp8, quantize_int4, quantize_int8
from tests.runtime.kernels.paged_batches import relative_error

TOLERANCE = {torch.float32: 1e-5, torch.float16: 1.5e-3, torch.bfloat16: 1e-2}


def _quantized(kind, n, k, group_size, dtype, seed, packing="planes"):
    """(qweight, scales, zeros, float32 dequantized weight) of a random Gaussian weight; int4 codes in
    `packing` (the kernels read the planes packing, the references either)."""
    w = torch.randn(n, k, generator=torch.Generator().manual_seed(seed))
    if kind == "int8":
        q, s = quantize_int8(w).astuple()
        return q, s, None, ref.dequantize_int8(q, s)
    if kind == "fp8":
        q, s = quantize_fp8(w).astuple()
        return q, s, None, ref.dequantize_fp8(q, s)
    q, s, z = quantize_int4(w.to(dtype), group_size).astuple()
    return ref.repack_int4(q, "sequential", packing), s, z, ref.dequantize_int4(q, s, z, group_size, torch.float32)


def _case(kind, m, n, k, dtype, group_size=32, seed=0, bias=False, packing="planes"):
    q, s, z, w = _quantized(kind, n, k, group_size, dtype, seed, packing)
    gen = torch.Generator().manual_seed(seed + 1)
    x = torch.randn(m, k, generator=gen).to(dtype)
    b = torch.randn(n, generator=gen).to(dtype) if bias else None
    want = x.double() @ w.double().T + (0 if b is None else b.double())
    return x, q, s, z, b, want


@pytest.mark.parametrize("kind", ["int8", "fp8", "int4"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
@pytest.mark.parametrize("m", [1, 5, 37])  # one row, a 16-row decode tile, prefill tiles
def test_quant_matmul_matches_dequantized_weight(kind, dtype, m):
    k = 256 if kind == "int4" else 100  # int4: two groups of 128; others: a ragged last K tile
    x, q, s, z, _, want = _case(kind, m, 37, k, dtype, group_size=128, seed=m)
    out = quant_matmul(x, q, s, z, kind, 128 if kind == "int4" else 0)
    assert out.shape == (m, 37) and out.dtype == dtype
    assert relative_error(out, want) < TOLERANCE[dtype]


@pytest.mark.parametrize("kind", ["int8", "fp8", "int4"])
@pytest.mark.parametrize("block_m", [1, 16])
def test_split_k_sums_partials_and_resets_its_counters(kind, block_m):
    """Three splits of K per tile plus a bias: the last split adds the partials; a second launch
    (a CUDA-graph replay) starts from zeroed counters and gives the same bits."""
    from model_optimizer.runtime.kernels import quant_matmul as launcher

    k, block_k = (384, 128) if kind == "int4" else (192, 32)
    x, q, s, z, b, want = _case(kind, 3 if block_m == 16 else 1, 45, k, torch.bfloat16, 128, seed=11, bias=True)
    tiles = QuantTiles(block_m=block_m, block_n=16, block_k=block_k, split_k=3)
    first = quant_matmul(x, q, s, z, kind, 128 if kind == "int4" else 0, b, tiles=tiles)
    second = quant_matmul(x, q, s, z, kind, 128 if kind == "int4" else 0, b, tiles=tiles)
    assert relative_error(first, want) < TOLERANCE[torch.bfloat16]
    assert torch.equal(first, second)
    assert not launcher._counters.by_device[x.device].any()


@pytest.mark.parametrize("kind", ["int8", "int4"])
@pytest.mark.parametrize("block_m", [1, 16])
def test_a_register_cap_is_a_launch_option_with_the_same_bits(kind, block_m, monkeypatch):
    """max_registers goes to the compiler as maxnreg (a separate build: it is in the compile key), only when
    set, and changes nothing in what is computed (the interpreter ignores the cap itself)."""
    from model_optimizer.runtime.kernels import quant_matmul as launcher

    kernel, launches = launcher._quant_matmul_kernel, []

    class Recorded:
        def __getitem__(self, grid):
            def launch(*args, **kwargs):
                launches.append(kwargs.get("maxnreg"))
                return kernel[grid](*args, **kwargs)

            return launch

    monkeypatch.setattr(launcher, "_quant_matmul_kernel", Recorded())
    k, block_k = (256, 128) if kind == "int4" else (128, 64)
    x, q, s, z, _, want = _case(kind, 1, 32, k, torch.bfloat16, 128, seed=5)
    capped = QuantTiles(block_m=block_m, block_n=16, block_k=block_k, split_k=2, max_registers=64)
    plain = QuantTiles(block_m=block_m, block_n=16, block_k=block_k, split_k=2)
    assert capped.compile_key != plain.compile_key
    out = quant_matmul(x, q, s, z, kind, 128 if kind == "int4" else 0, tiles=capped)
    assert torch.equal(out, quant_matmul(x, q, s, z, kind, 128 if kind == "int4" else 0, tiles=plain))
    assert launches == [64, None]
    assert relative_error(out, want) < TOLERANCE[torch.bfloat16]


def test_only_int8_one_row_gemvs_are_swept_under_a_register_cap():
    """The sweep times int8's 16-row GEMV capped at 72 registers (no spills on sm_90); e4m3's widening
    spills under that cap, and no other format or row count is offered one."""
    from model_optimizer.runtime.kernels.quant_tiles import candidates

    capped = {
        (kind, m): [t for t in candidates(kind, m, 28672, 4096, 132, w8a8=True) if t.max_registers]
        for kind in ("int8", "fp8", "int4", "bf16")
        for m in (1, 8)
    }
    assert [(t.kernel, t.block_n, t.max_registers) for t in capped["int8", 1]] == [("gemv", 16, 72)]
    assert not any(found for key, found in capped.items() if key != ("int8", 1))


@pytest.mark.parametrize("kind", ["int8", "fp8"])
@pytest.mark.parametrize("block_m", [1, 16])
def test_kernel_decodes_every_byte_code(kind, block_m):
    """Every int8 value and every finite e4m3 value (subnormals, both zeros) must come out of the
    CUDA-core GEMV and the tensor-core tiles as torch's conversion says."""
    codes = torch.arange(256, dtype=torch.int32).to(torch.uint8)
    codes = torch.stack([codes, codes.flip(0)])  # (2, 256): each code in two positions
    if kind == "int8":
        q = codes.view(torch.int8)
    else:
        codes[(codes & 0x7F) == 0x7F] = 0  # 0x7F and 0xFF are NaN, never a weight
        q = codes.view(ref.FP8_DTYPE)
    scales = torch.tensor([0.5, 3.0])
    x = torch.randn(1, 256, generator=torch.Generator().manual_seed(13))
    out = quant_matmul(x, q, scales, None, kind, tiles=QuantTiles(block_m=block_m, block_n=16, block_k=64))
    want = x.double() @ (q.double() * scales.double()[:, None]).T
    assert relative_error(out, want) < 1e-6


@pytest.mark.parametrize("block_m", [1, 16])
def test_kernel_decodes_every_int4_code_and_zero_point(block_m):
    """Each nibble of a 16-bit lane (a plane; the GEMV reads nibbles 0..4 of a word in place and 5..7
    from a shifted copy) holds all 16 values against all 16 zero points, float32 throughout: the
    product must be the dequantized weight's to float32 rounding."""
    n, k = 16, 256
    rows = torch.arange(n)[:, None]
    cols = torch.arange(k)[None, :]
    q = (cols % 32 + rows * 3 + cols // 32) % 16  # lane c, plane p, row r: every value in every plane
    packed = ref.pack_int4_planes(q)
    zeros = ((torch.arange(n)[:, None] + torch.arange(2)[None, :] * 7) % 16).to(torch.uint8)  # (16, 2 groups)
    scales = torch.linspace(0.25, 2.0, n * 2).view(n, 2)
    x = torch.randn(1, k, generator=torch.Generator().manual_seed(17))
    tiles = QuantTiles(block_m=block_m, block_n=16, block_k=256 if block_m == 1 else 128)
    out = quant_matmul(x, packed, scales, zeros, "int4", 128, tiles=tiles)
    want = x.double() @ ref.dequantize_int4(packed, scales, zeros, 128, torch.float64, "planes").T
    assert relative_error(out, want) < 1e-6


def test_row_tiles_of_one_weight_tile_cover_every_output():
    """Five row tiles (a ragged last one) per weight tile, four weight tiles: each output once.
    The output is compared whole, so a tile visited twice or never shows up."""
    x, q, s, z, b, want = _case("int4", 70, 50, 256, torch.float32, group_size=128, seed=3, bias=True)
    out = quant_matmul(x, q, s, z, "int4", 128, b, tiles=QuantTiles(block_m=16, block_n=16, block_k=128))
    assert relative_error(out, want) < TOLERANCE[torch.float32]


def test_int4_groups_of_several_tiles():
    """A group of 384 columns (not a power of two) spans three 128-column tiles that share its scale."""
    x, q, s, z, _, want = _case("int4", 2, 24, 768, torch.float16, group_size=384, seed=5)
    assert relative_error(quant_matmul(x, q, s, z, "int4", 384), want) < TOLERANCE[torch.float16]


# 16-row tiles run tl.dot under the interpreter: 4-11 s a case, so those are slow
@pytest.mark.parametrize("block_m", [1, pytest.param(16, marks=pytest.mark.slow)])
@pytest.mark.parametrize("m", [1, 3, 8, 16])
@pytest.mark.parametrize(("block_k", "k", "group_size"), [(256, 384, 128), (512, 1024, 256), (256, 768, 384)])
def test_int4_tiles_of_several_group_slices(block_m, m, block_k, k, group_size):
    """Groups wider than a 128-column block (256, 384 columns), K of 3-8 blocks, odd N (no even-N fast
    path), one to three splits (a split of one block: the tensor-core program's prefetch of the next
    block's scales and the GEMV's of the next tile must read nothing past it); the GEMV with tiles of
    2-4 blocks (a ragged last one: 384 = 256 + 128), with and without its prefetch."""
    if block_m == 1 and m != 1:
        pytest.skip("the CUDA-core GEMV is one row")
    x, q, s, z, b, want = _case("int4", m, 45, k, torch.bfloat16, group_size=group_size, seed=m + k, bias=True)
    for split_k in (1, 2, 3):
        for num_stages in (1, 2):  # the GEMV without and with the register prefetch of the next tile
            tiles = QuantTiles(block_m, 16, block_k if block_m == 1 else 128, split_k, num_stages=num_stages)
            out = quant_matmul(x, q, s, z, "int4", group_size, b, tiles=tiles)
            assert relative_error(out, want) < TOLERANCE[torch.bfloat16], tiles


def test_int4_tiles_with_an_accumulator_per_plane():
    """accumulators=4: each plane's dot into its own accumulator, summed at the end; with K of three
    blocks, one and two splits (a split's sum over its own blocks), a bias and odd N."""
    x, q, s, z, b, want = _case("int4", 5, 45, 384, torch.bfloat16, group_size=128, seed=11, bias=True)
    for split_k in (1, 2):
        tiles = QuantTiles(16, 16, 128, split_k, accumulators=4)
        assert relative_error(quant_matmul(x, q, s, z, "int4", 128, b, tiles=tiles), want) < TOLERANCE[torch.bfloat16]
    for kind, tiles in (
        ("int4", QuantTiles(1, 16, 128, accumulators=4)),
        ("int4", QuantTiles(16, 16, 128, accumulators=2)),
    ):
        with pytest.raises(ValueError, match="accumulators is 1, or 4"):
            quant_matmul(x, q, s, z, kind, 128, tiles=tiles)
    x, q, s, _, _, _ = _case("int8", 5, 16, 256, torch.bfloat16, seed=3)
    with pytest.raises(ValueError, match="accumulators is 1, or 4"):
        quant_matmul(x, q, s, None, "int8", 0, tiles=QuantTiles(16, 16, 128, accumulators=4))


@pytest.mark.parametrize("kind", ["int8", "fp8"])
@pytest.mark.parametrize("m", [1, 3, 8, 16])
def test_decode_rows_with_odd_n_and_k(kind, m):
    """N = 37 and K = 300 fill no tile (masks on both), at the decode row counts; the GEMV (one row)
    with and without its prefetch (which odd K turns off), the dot with two and three splits."""
    x, q, s, z, b, want = _case(kind, m, 37, 300, torch.bfloat16, seed=60 + m, bias=True)
    tiles = [QuantTiles(16, 16, 64, 2), QuantTiles(16, 32, 32, 3)]
    if m == 1:
        tiles += [QuantTiles(1, 16, 64, 2, num_stages=1), QuantTiles(1, 16, 64, 2, num_stages=2)]
    for t in tiles:
        assert relative_error(quant_matmul(x, q, s, z, kind, 0, b, tiles=t), want) < TOLERANCE[torch.bfloat16], t


@pytest.mark.parametrize("kind", ["int8", "fp8", "int4"])
@pytest.mark.parametrize("num_stages", [1, 2])
@pytest.mark.parametrize("split_k", [1, 3, 6])
def test_gemv_prefetch_stops_at_its_split(kind, num_stages, split_k):
    """The GEMV's register prefetch (num_stages 2) runs one tile ahead: with 1, 2 or 6 tiles a split
    it must read the tiles of its own split once and nothing after (the next split's tiles would
    be counted twice)."""
    k = 768
    x, q, s, z, b, want = _case(kind, 1, 48, k, torch.float32, group_size=128, seed=50 + split_k, bias=True)
    tiles = QuantTiles(1, 16, 128, split_k, num_stages=num_stages)
    out = quant_matmul(x, q, s, z, kind, 128 if kind == "int4" else 0, b, tiles=tiles)
    assert relative_error(out, want) < TOLERANCE[torch.float32], tiles


@pytest.mark.parametrize("kind", ["int8", "fp8", "int4"])
@pytest.mark.parametrize("m", [1, 3, 8, 16])
def test_even_shapes_take_the_unmasked_path(kind, m):
    """N and K multiples of the tile (EVEN_N, EVEN_K: no masks) at the decode row counts, split K."""
    k = 512
    x, q, s, z, b, want = _case(kind, m, 64, k, torch.float16, group_size=128, seed=40 + m, bias=True)
    for block_m in (1, 16) if m == 1 else (16,):
        block_k = 128 if kind == "int4" and block_m > 1 else 256  # int4 tensor-core tiles: one planes block
        tiles = QuantTiles(block_m=block_m, block_n=32, block_k=block_k, split_k=2)
        out = quant_matmul(x, q, s, z, kind, 128 if kind == "int4" else 0, b, tiles=tiles)
        assert relative_error(out, want) < TOLERANCE[torch.float16], tiles


def test_int4_tiles_are_made_of_group_slices():
    x, q, s, z, _, _ = _case("int4", 2, 24, 96, torch.float16, group_size=48, seed=5, packing="sequential")
    with pytest.raises(ValueError, match="must be multiples of 128"):
        quant_matmul(x, q, s, z, "int4", 48)
    x, q, s, z, _, _ = _case("int4", 2, 24, 256, torch.float16, group_size=128, seed=5)
    with pytest.raises(ValueError, match="block_k must be 128 for tensor-core tiles"):
        quant_matmul(x, q, s, z, "int4", 128, tiles=QuantTiles(block_m=16, block_n=16, block_k=256))
    with pytest.raises(ValueError, match="a multiple of 128 for the GEMV"):
        quant_matmul(x[:1], q, s, z, "int4", 128, tiles=QuantTiles(block_m=1, block_n=16, block_k=64))
    with pytest.raises(ValueError, match="block_m and block_n >= 16"):
        quant_matmul(x, q, s, z, "int4", 128, tiles=QuantTiles(block_m=8, block_n=16, block_k=128))


@pytest.mark.parametrize("kind", ["int8", "fp8", "int4"])
def test_tiles_that_are_not_powers_of_two_are_refused(kind):
    """A 384-column K tile once ran the GEMV over 256 of every 384 columns: a silent wrong product."""
    x, q, s, z, _, _ = _case(kind, 1, 16, 768, torch.float16, group_size=128, seed=5)
    group = 128 if kind == "int4" else 0
    for tiles in (QuantTiles(block_m=1, block_n=16, block_k=384), QuantTiles(block_m=1, block_n=24, block_k=256)):
        with pytest.raises(ValueError, match="must be a power of two"):
            quant_matmul(x, q, s, z, kind, group, tiles=tiles)


@pytest.mark.parametrize("kind", ["int8", "fp8", pytest.param("int4", marks=pytest.mark.slow)])  # int4: many candidates
@pytest.mark.parametrize("m", [1, 16, 64, 100])
def test_every_sweep_candidate_is_correct(kind, m):
    """Whatever the sweep picks for a shape must compute the same product (each candidate, real tile sizes)."""
    from model_optimizer.runtime.kernels.quant_tiles import candidates

    k = 512
    x, q, s, z, _, want = _case(kind, m, 40, k, torch.float16, group_size=128, seed=m)
    for tiles in candidates(kind, m, 40, k, 132, w8a8=False):
        if tiles.backend != "triton":
            continue  # the dense matmul after dequantize_weight (tests/gpu)
        out = quant_matmul(x, q, s, z, kind, 128 if kind == "int4" else 0, tiles=tiles)
        assert relative_error(out, want) < TOLERANCE[torch.float16], tiles


def test_default_tiles_per_regime():
    decode = choose_tiles(1, 4096, 4096, "int8", 0, 132)
    assert decode.kernel == "mma" and decode.block_m == 16 and decode.split_k > 1  # 32 tiles: splits fill the GPU
    small = choose_tiles(8, 1024, 3072, "int4", 128, 132)
    assert small.block_m == 16 and small.block_k == 128 and 1 < small.split_k <= MAX_SPLIT_K  # planes blocks
    batch64 = choose_tiles(64, 4096, 4096, "int4", 128, 132, program_only=True)
    assert batch64.block_m == 64 and batch64.split_k > 1  # 32 weight tiles alone leave most of the GPU idle
    assert choose_tiles(64, 4096, 4096, "int4", 128, 132).backend == "gluon"  # where it can run (sm_90, bf16)
    assert choose_tiles(256, 4096, 4096, "int8", 0, 132).kernel == "mma"  # the largest decode batches
    prefill = choose_tiles(512, 4096, 4096, "int4", 128, 132)
    assert prefill.kernel == "dequant"  # above 256 rows: widened once, a dense matmul
    assert choose_tiles(512, 4096, 4096, "fp8", 0, 132, w8a8=True).backend == "scaled_mm"
    assert choose_tiles(512, 4096, 4096, "int8", 0, 132, w8a8=True).backend == "int_mm"  # cuBLAS's int8 GEMM
    assert choose_tiles(64, 4096, 4096, "int8", 0, 132, w8a8=True).kernel == "mma"  # unmeasured: weight-only
    # that may quantize its activations: cuBLAS's fp8 / int8 GEMM from the 128-row bucket (65 rows), in graphs too
    assert choose_tiles(65, 5120, 3584, "fp8", 0, 132, w8a8=True, graph_safe=True).backend == "scaled_mm"
    assert choose_tiles(256, 5120, 3584, "int8", 0, 132, w8a8=True, graph_safe=True).backend == "int_mm"
    assert choose_tiles(256, 5120, 3584, "fp8", 0, 132).backend == "triton"  # exact activations asked
    assert choose_tiles(64, 5120, 3584, "fp8", 0, 132, w8a8=True).backend == "triton"
    assert choose_tiles(1, 64, 32, "int8", 0, 132).split_k == 1  # never a split without columns to read


def test_tile_table_applies_to_its_gpus_only(tmp_path, monkeypatch, caplog):
    """A sweep table is read from $MOPT_QUANT_TILES for the GPU it names and those its "also" lists; entries that do not fit
    the call (a one-row GEMV for 8 rows, _scaled_mm where the caller cannot take it) are skipped."""
    from model_optimizer.runtime.kernels import quant_tiles

    gemv = QuantTiles(block_m=1, block_n=32, block_k=256, split_k=4)
    w8a8 = QuantTiles(block_m=64, block_n=128, block_k=256, split_k=2, w8a8=True)
    entries = {
        quant_tiles.table_key("fp8", 1, 4096, 4096): gemv,
        quant_tiles.table_key("fp8", 8, 4096, 4096): gemv,  # wrong for 8 rows: never used there
        quant_tiles.table_key("fp8", 64, 4096, 4096): QuantTiles(0, 0, 0, backend="scaled_mm"),
        quant_tiles.table_key("fp8a", 32, 4096, 4096): w8a8,  # the fastest with quantized activations
        quant_tiles.table_key("int8a", 256, 4096, 4096): quant_tiles.INT_MM,
    }
    path = tmp_path / "tiles.json"
    path.write_text(json.dumps(quant_tiles.table_json("NVIDIA H200", entries)))
    monkeypatch.setenv(quant_tiles.TABLE_ENV, str(path))
    quant_tiles._table_for.cache_clear()
    try:
        assert choose_tiles(1, 4096, 4096, "fp8", 0, 132, gpu="NVIDIA H200") == gemv
        assert choose_tiles(1, 4096, 4096, "fp8", 0, 132, gpu="NVIDIA A100") != gemv
        assert choose_tiles(8, 4096, 4096, "fp8", 0, 132, gpu="NVIDIA H200").block_m == 16
        assert choose_tiles(64, 4096, 4096, "fp8", 0, 132, "NVIDIA H200", w8a8=True).backend == "scaled_mm"
        assert choose_tiles(64, 4096, 4096, "fp8", 0, 132, "NVIDIA H200").backend == "triton"
        assert choose_tiles(32, 4096, 4096, "fp8", 0, 132, "NVIDIA H200", w8a8=True) == w8a8
        assert not choose_tiles(32, 4096, 4096, "fp8", 0, 132, "NVIDIA H200").w8a8  # exact activations asked
        assert choose_tiles(1, 4096, 1024, "fp8", 0, 132, gpu="NVIDIA H200") != gemv  # another shape
        # int8: the "int8a" entry (cuBLAS's int8 GEMM) only where quantized activations are allowed
        assert choose_tiles(256, 4096, 4096, "int8", 0, 132, "NVIDIA H200", w8a8=True).backend == "int_mm"
        assert not choose_tiles(256, 4096, 4096, "int8", 0, 132, "NVIDIA H200").quantizes_activations
        listed = quant_tiles.table_json("NVIDIA H200", entries) | {"also": {"NVIDIA H100 80GB HBM3": ["fp8"]}}
        path.write_text(json.dumps(listed))
        quant_tiles._table_for.cache_clear()
        assert choose_tiles(1, 4096, 4096, "fp8", 0, 132, gpu="NVIDIA H100 80GB HBM3") == gemv  # measured there too
        # only the formats listed: the fp8a entry (W8A8 allowed) is not, so the default rule's launch there
        w8a8_there = choose_tiles(32, 4096, 4096, "fp8", 0, 132, "NVIDIA H100 80GB HBM3", w8a8=True)
        assert w8a8_there != w8a8 and w8a8_there == quant_tiles.default_tiles("fp8", 32, 4096, 4096, 132, True)
        with caplog.at_level(logging.INFO, logger=quant_tiles.__name__):
            assert choose_tiles(1, 4096, 4096, "fp8", 0, 132, gpu="NVIDIA H100 PCIe") != gemv
        assert "NVIDIA H100 PCIe has no table measured on it" in caplog.text
        path.write_text(json.dumps(listed | {"also": ["NVIDIA H100 80GB HBM3"]}))
        quant_tiles._table_for.cache_clear()
        with pytest.raises(ValueError, match="'also' must map GPU names to lists of table formats"):
            choose_tiles(1, 4096, 4096, "fp8", 0, 132, gpu="NVIDIA H100 80GB HBM3")
        old = quant_tiles.table_json("NVIDIA H200", entries)
        del old["version"]  # a table of the kernels before the planes packing: not read
        path.write_text(json.dumps(old))
        quant_tiles._table_for.cache_clear()
        assert choose_tiles(1, 4096, 4096, "fp8", 0, 132, gpu="NVIDIA H200") != gemv
        path.write_text(json.dumps({"entries": {}}))
        quant_tiles._table_for.cache_clear()
        with pytest.raises(ValueError, match="needs 'gpu' and 'entries'"):
            choose_tiles(1, 4096, 4096, "fp8", 0, 132, gpu="NVIDIA H200")
    finally:
        quant_tiles._table_for.cache_clear()


def test_quantize_rows_fp8_matches_reference():
    gen = torch.Generator().manual_seed(21)
    x = (torch.randn(6, 300, generator=gen) * torch.logspace(-3, 2, 6).unsqueeze(1)).bfloat16()
    x[4] = 0  # a zero row keeps scale 1
    got_q, got_scales = quantize_rows_fp8(x)
    want_q, want_scales = ref.quantize_rows_fp8_ref(x)
    assert got_q.dtype == ref.FP8_DTYPE and got_scales.shape == (6, 1)
    torch.testing.assert_close(got_scales, want_scales, rtol=1e-6, atol=0)
    assert got_scales[4].item() == 1.0
    # the interpreter's e4m3 cast drops the carry when rounding up to the next power of two
    # (124.3 -> 64 instead of 128); on the GPU tests/gpu compares every element
    want = want_q.float()
    log2 = want.abs().log2()
    exact = (want == 0) | (log2 != log2.round())
    assert exact.float().mean() > 0.8
    # and it rounds a few ties the other way: at most one e4m3 step (1/8 relative) on 2% of elements
    got, want = got_q.float()[exact], want[exact]
    assert (got != want).float().mean() < 0.02
    assert ((got - want).abs() <= want.abs() / 8).all()


def test_planes_packing_follows_its_layout_and_round_trips():
    """Lane c of a 128-column block holds columns c, c + 32, c + 64, c + 96 in its nibbles 0..3; the
    lanes of a row are the int16 view of its words (low half first). Repacking is exact both ways."""
    q = torch.randint(0, 16, (3, 256), generator=torch.Generator().manual_seed(4))
    packed = ref.pack_int4_planes(q)
    assert packed.dtype == torch.int32 and packed.shape == (3, 32)
    lanes = packed.view(torch.int16).to(torch.int32) & 0xFFFF
    lane = 32 + 5  # block 1, lane 5
    assert lanes[2, lane].item() == sum(int(q[2, 128 + 32 * p + 5]) << (4 * p) for p in range(4))
    assert torch.equal(ref.unpack_int4_planes(packed), q.to(torch.uint8))
    sequential = ref.pack_int4(q)
    assert torch.equal(ref.repack_int4(sequential, "sequential", "planes"), packed)
    assert torch.equal(ref.repack_int4(packed, "planes", "sequential"), sequential)
    scales, zeros = torch.rand(3, 2) + 0.5, torch.randint(0, 16, (3, 2)).to(torch.uint8)
    assert torch.equal(
        ref.dequantize_int4(packed, scales, zeros, 128, packing="planes"),
        ref.dequantize_int4(sequential, scales, zeros, 128),
    )
    with pytest.raises(ValueError, match="K a multiple of 128"):
        ref.pack_int4_planes(q[:, :96])
    with pytest.raises(ValueError, match="packing must be one of"):
        ref.repack_int4(packed, "planes", "awq")


@pytest.mark.parametrize("m", [1, 5, 20])
def test_w8a8_tiles_multiply_quantized_activations(m):
    """fp8 W8A8 tiles: x quantized per token by quantize_rows_fp8 (its own rounding, checked below
    against the torch reference) times the e4m3 weight, both scales after the dot; odd N, split K."""
    x, q, s, _, b, _ = _case("fp8", m, 37, 320, torch.bfloat16, seed=70 + m, bias=True)
    x_q, x_s = quantize_rows_fp8(x)
    want = (x_q.double() * x_s.double()) @ (q.double() * s.double()[:, None]).T + b.double()
    for tiles in (QuantTiles(16, 16, 64, 2, w8a8=True), QuantTiles(16, 32, 128, 1, w8a8=True)):
        out = quant_matmul(x, q, s, None, "fp8", 0, b, tiles=tiles)
        assert relative_error(out, want) < TOLERANCE[torch.bfloat16], tiles
    with pytest.raises(ValueError, match="W8A8 tiles are for fp8 and int8"):
        quant_matmul(x, q.view(torch.int8), s, None, "int8", 0, tiles=QuantTiles(1, 16, 64, w8a8=True))
    lanes = torch.zeros(37, 40, dtype=torch.int32)
    with pytest.raises(ValueError, match="W8A8 tiles are for fp8 and int8"):
        quant_matmul(x, lanes, s, s, "int4", 128, tiles=QuantTiles(16, 16, 128, w8a8=True))


def test_quantize_rows_int8_matches_reference_exactly():
    """Per-token int8 codes and scales equal the torch reference's bit for bit, ties to even included
    (x / scale = 2.5 and -3.5 exactly: 2 and -4), over five decades of row scale and a zero row."""
    gen = torch.Generator().manual_seed(23)
    x = (torch.randn(6, 300, generator=gen) * torch.logspace(-3, 2, 6).unsqueeze(1)).bfloat16()
    x[4] = 0  # a zero row keeps scale 1
    x[5, :3] = torch.tensor([127.0, 2.5, -3.5])  # amax 127: scale 1, so the ties land exactly on .5
    x[5, 3:] = x[5, 3:].clamp(-100, 100)
    got_q, got_scales = quantize_rows_int8(x)
    want_q, want_scales = ref.quantize_rows_int8_ref(x)
    assert got_q.dtype == torch.int8 and got_scales.shape == (6, 1)
    assert torch.equal(got_scales, want_scales) and got_scales[4].item() == 1.0
    assert torch.equal(got_q, want_q)
    assert got_q[5, :3].tolist() == [127, 2, -4]
    assert got_q.abs().max().item() == 127


@pytest.mark.parametrize("m", [5, 20, 70])
def test_int8_w8a8_tiles_match_the_reference(m):
    """int8 W8A8 tiles: x quantized per token times the int8 weight in exact int32 sums, both scales after
    (split K, odd N, a K no tile divides); equal to int8_w8a8_linear_ref to float32 rounding, and a
    W8A8 tile is chosen only where the caller accepts quantized activations."""
    x, q, s, _, b, _ = _case("int8", m, 37, 320, torch.bfloat16, seed=90 + m, bias=True)
    want = ref.int8_w8a8_linear_ref(x.float(), q, s, b.float()).double()
    for tiles in (QuantTiles(16, 16, 64, 2, w8a8=True), QuantTiles(16, 32, 128, 1, w8a8=True),
                  QuantTiles(64, 64, 256, 3, w8a8=True), QuantTiles(256, 64, 128, w8a8=True)):  # fmt: skip
        out = quant_matmul(x, q, s, None, "int8", 0, b, tiles=tiles)
        assert relative_error(out, want) < 4e-3, tiles  # the output's one bf16 rounding
    if m >= INT_MM_MIN_ROWS:  # cuBLAS's int8 GEMM (torch._int_mm runs on the CPU too)
        x8, q8, s8, _, b8, _ = _case("int8", m, 40, 320, torch.bfloat16, seed=90 + m, bias=True)  # N, K: 8 | both
        want8 = ref.int8_w8a8_linear_ref(x8.float(), q8, s8, b8.float()).double()
        assert relative_error(int_mm_w8a8(x8, q8, s8, b8), want8) < 4e-3
    exact = ref.w8a16_linear_ref(x.double(), q, s, b.double())
    assert 1e-3 < relative_error(want, exact) < 3e-2  # what quantizing the activations costs here


@pytest.mark.parametrize("kind", ["int8", "fp8", "int4"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
def test_dequantize_weight_is_the_reference_weight(kind, dtype):
    """The "dequant" backend's whole weight equals the reference's, element for element (fp16 rounding
    of the float32 value, once); N and K fill no tile."""
    from model_optimizer.runtime.kernels.quant_matmul import dequantize_weight

    w = torch.randn(70, 384, generator=torch.Generator().manual_seed(8))
    if kind == "int4":
        q, s, z = quantize_int4(w.to(dtype), 128).astuple()
        want = ref.dequantize_int4(q, s, z, 128, dtype)
        got = dequantize_weight(ref.repack_int4(q, "sequential", "planes"), s, z, kind, 128, dtype)
    else:
        q, s = (quantize_int8 if kind == "int8" else quantize_fp8)(w[:, :300]).astuple()
        want = (ref.dequantize_int8 if kind == "int8" else ref.dequantize_fp8)(q, s, dtype)
        got = dequantize_weight(q, s, None, kind, 0, dtype, out=torch.empty(70 * 400, dtype=dtype))
    assert torch.equal(got, want)


def test_pack_unpack_and_dequantize_int4_follow_the_layout():
    q = torch.randint(0, 16, (3, 32), generator=torch.Generator().manual_seed(2))
    packed = ref.pack_int4(q)
    assert packed.dtype == torch.int32 and packed.shape == (3, 4)
    word = sum(int(q[1, 8 + j]) << (4 * j) for j in range(8))  # word 1 of row 1: k = 8..15, little nibble first
    assert packed[1, 1].item() == (word - 2**32 if word >= 2**31 else word)
    assert torch.equal(ref.unpack_int4(packed), q.to(torch.uint8))
    scales = torch.tensor([[0.5, 2.0]] * 3)
    zeros = torch.tensor([[3, 7]] * 3, dtype=torch.uint8)
    w = ref.dequantize_int4(packed, scales, zeros, 16)
    assert w[2, 20].item() == (q[2, 20].item() - 7) * 2.0 and w[0, 3].item() == (q[0, 3].item() - 3) * 0.5


def test_round_to_nearest_quantizers_stay_close():
    w = torch.randn(64, 256, generator=torch.Generator().manual_seed(9))
    q8, s8 = quantize_int8(w).astuple()
    qf, sf = quantize_fp8(w).astuple()
    q4, s4, z4 = quantize_int4(w, 128).astuple()
    assert relative_error(ref.dequantize_int8(q8, s8), w) < 0.01
    assert relative_error(ref.dequantize_fp8(qf, sf), w) < 0.04  # 3 mantissa bits
    assert relative_error(ref.dequantize_int4(q4, s4, z4, 128), w) < 0.12
    assert s4.dtype == w.dtype and z4.dtype == torch.uint8 and int(z4.max()) <= 15


def test_linear_functions_on_cpu_are_the_references():
    x, q, s, z, b, _ = _case("int4", 3, 24, 64, torch.float32, group_size=32, seed=4, bias=True, packing="sequential")
    x3 = x.view(3, 1, 64)  # leading dimensions are kept
    got = w4a16_linear(x3, q, s, z, 32, b)
    assert got.shape == (3, 1, 24)
    assert torch.equal(got, ref.w4a16_linear_ref(x3, q, s, z, 32, b))
    q8, s8, _, _ = _quantized("int8", 24, 64, 0, torch.float32, 1)
    assert torch.equal(w8a16_linear(x, q8, s8), ref.w8a16_linear_ref(x, q8, s8))
    qf, sf, _, _ = _quantized("fp8", 24, 64, 0, torch.float32, 2)
    assert torch.equal(fp8_linear(x, qf, sf, b), ref.fp8_w8a8_linear_ref(x, qf, sf, b))  # activations rounded too


def test_linear_functions_reject_bad_layouts():
    x, q, s, z, _, _ = _case("int4", 2, 16, 64, torch.float32, group_size=32, seed=6, packing="sequential")
    with pytest.raises(ValueError, match="group_size must be a positive divisor"):
        w4a16_linear(x, q, s, z, 48)
    with pytest.raises(ValueError, match="scales and zeros must be"):
        w4a16_linear(x, q, s[:, :1], z, 32)
    with pytest.raises(ValueError, match="x has 63 features"):
        w4a16_linear(x[:, :63], q, s, z, 32)
    with pytest.raises(ValueError, match="packing must be one of"):
        w4a16_linear(x, q, s, z, 32, packing="awq")
    with pytest.raises(ValueError, match="qweight must be 2-D torch.int8"):
        w8a16_linear(x, q, s[:, 0])
    q8, s8 = quantize_int8(torch.randn(16, 64)).astuple()
    with pytest.raises(ValueError, match="per output channel"):
        w8a16_linear(x, q8, s8.view(16, 1))
    with pytest.raises(ValueError, match="bias must be \\(16,\\)"):
        fp8_linear(x, *quantize_fp8(torch.randn(16, 64)).astuple(), torch.zeros(15))


def test_linear_functions_find_these_kernels_through_triton_kernel():
    from model_optimizer.runtime.kernels import triton_kernel

    assert triton_kernel("quant_matmul", "quant_matmul") is quant_matmul
    assert triton_kernel("quant_matmul", "quantize_rows_fp8") is quantize_rows_fp8


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize(
    ("n", "k", "tiles"),
    [
        (96, 64, QuantTiles(1, 16, 32, 1, num_stages=2)),  # prefetching GEMV, one split
        (96, 256, QuantTiles(1, 16, 64, 3, num_stages=2)),  # split-K: the last split applies the gate
        (40, 64, QuantTiles(1, 8, 32, 2, num_stages=1)),  # 20 outputs in tiles of 4: the last one masked
    ],
)
def test_gated_gemv_is_silu_and_mul_of_the_projection(dtype, n, k, tiles):
    """`gated`: x @ [gate | up].T then silu(gate) * up in one launch, rounded where the two steps round
    (the projection's output, silu's, the product: layers/activation.silu_and_mul's eager form)."""
    from model_optimizer.runtime.layers.activation import silu_and_mul

    gen = torch.Generator().manual_seed(n + k)
    x = torch.randn(1, k, generator=gen).to(dtype)
    w = (torch.randn(n, k, generator=gen) / k**0.5).to(dtype)
    bias = torch.randn(n, generator=gen).to(dtype)
    got = quant_matmul(x, w, None, None, "bf16", 0, bias, tiles=tiles, gated=True)
    want = silu_and_mul.__wrapped__((x.double() @ w.double().T + bias.double()).to(dtype))
    assert got.shape == (1, n // 2) and got.dtype == dtype
    # float32: the sum's order only; bf16: the same roundings, so equal but for a rare one-unit tie
    assert relative_error(got, want) < (1e-6 if dtype == torch.float32 else 4e-3)


def test_gated_needs_gemv_tiles_and_an_even_n():
    x, w = torch.randn(1, 64), torch.randn(96, 64)
    with pytest.raises(ValueError, match="gated"):
        quant_matmul(x, w, None, None, "bf16", 0, None, tiles=QuantTiles(16, 16, 32, 1), gated=True)
    with pytest.raises(ValueError, match="gated"):
        quant_matmul(x, torch.randn(95, 64), None, None, "bf16", 0, None, tiles=QuantTiles(1, 16, 32, 1), gated=True)


@pytest.mark.parametrize("kind", ["int8", "fp8", "int4"])
@pytest.mark.parametrize(
    "tiles",
    [QuantTiles(1, 16, 128, 1, num_stages=2), QuantTiles(1, 8, 128, 2, num_stages=1)],  # one split; split-K
)
def test_gated_quantized_gemv_is_silu_and_mul_of_its_projection(kind, tiles):
    """A quantized [gate | up] at one row with the SiLU-and-mul in the GEMV's launch: the scales (per
    channel, or per group with zero points) of gate and up rows land on the right outputs. (The layers
    use it for int8 and fp8; int4's measured slower on the H200, quant_linear.gated_gemv.)"""
    from model_optimizer.runtime.layers.activation import silu_and_mul

    dtype, n, k = torch.bfloat16, 96, 256
    x, q, s, z, b, _ = _case(kind, 1, n, k, dtype, group_size=128, seed=7, bias=True)
    group = 128 if kind == "int4" else 0
    got = quant_matmul(x, q, s, z, kind, group, b, tiles=tiles, gated=True)
    want = silu_and_mul.__wrapped__(quant_matmul(x, q, s, z, kind, group, b, tiles=tiles))
    assert got.shape == (1, n // 2) and got.dtype == dtype
    assert relative_error(got, want) < TOLERANCE[dtype]  # bf16: some outputs one unit apart (silu's rounding)
    got32 = quant_matmul(x.float(), q, s, z, kind, group, b.float(), tiles=tiles, gated=True)
    gate, up = quant_matmul(x.float(), q, s, z, kind, group, b.float(), tiles=tiles).double().chunk(2, dim=-1)
    assert relative_error(got32, torch.nn.functional.silu(gate) * up) < 1e-6  # float32: the sum's order only


def test_gated_gemv_leaves_the_cpu_to_the_two_steps():
    from model_optimizer.runtime.kernels.quant_linear import gated_gemv

    x, q, s, _, _, _ = _case("int8", 1, 96, 64, torch.bfloat16)
    assert gated_gemv("int8", x, q, s) is None
