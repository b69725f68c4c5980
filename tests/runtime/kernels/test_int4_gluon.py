"""The Gluon int4 kernel: where the tile table and the dispatch choose it, and that its table's launch
shapes compile for sm_90 (Gluon has no interpreter: tests/gpu/test_quant_kernels_gpu.py runs it)."""

import pytest
import torch

from model_optimizer.runtime.kernels import quant_tile_specs, quant_tiles
from model_optimizer.runtime.kernels.int4_gluon import fits
from model_optimizer.runtime.kernels.quant_matmul import choose_tiles
from tests.runtime.kernels.sm90_script import run_sm90_script

H200 = "NVIDIA H200"


def test_the_h200_table_names_gluon_where_it_measured_faster_and_our_program_otherwise():
    tiles = choose_tiles(64, 28672, 4096, "int4", 128, 132, H200)
    assert (tiles.backend, tiles.block_m, tiles.block_n, tiles.split_k) == ("gluon", 64, 128, 1)
    assert tiles.graph_safe and not tiles.quantizes_activations
    # quant_matmul (and the dispatch where Gluon cannot run) asks for our Triton program's tiles only
    assert choose_tiles(64, 28672, 4096, "int4", 128, 132, H200, program_only=True).backend == "triton"
    # a capture takes the gluon entry itself: no dequant scratch buffer behind it
    assert choose_tiles(256, 6144, 4096, "int4", 128, 132, H200, graph_safe=True).backend == "gluon"
    assert choose_tiles(16, 28672, 4096, "int4", 128, 132, H200).backend == "triton"  # it lost at 16 rows
    # the H100 SXM takes the H200's table: its decode steps measured faster with it than with the default rule
    h100 = "NVIDIA H100 80GB HBM3"
    assert choose_tiles(64, 28672, 4096, "int4", 128, 132, h100) == tiles
    assert choose_tiles(1, 4096, 4096, "fp8", 0, 132, h100) == choose_tiles(1, 4096, 4096, "fp8", 0, 132, H200)
    assert choose_tiles(1, 1024, 2048, "bf16", 0, 132, h100).backend == "torch"  # bf16 was not measured there
    assert choose_tiles(1, 1024, 2048, "bf16", 0, 132, H200).backend != "torch"


@pytest.mark.parametrize(
    ("m", "n", "k", "launch"),
    [
        (32, 6144, 4096, (32, 64, 3, 4, 4)),  # the H100's winners (block_m, block_n, split, warps, stages)
        (32, 4096, 14336, (32, 64, 5, 4, 4)),
        (64, 4096, 4096, (32, 64, 3, 4, 4)),  # the H200's
        (64, 28672, 4096, (32, 128, 1, 4, 4)),
        (128, 4096, 4096, (128, 128, 4, 8, 3)),  # above 64 rows: split to one wave
        (128, 4096, 14336, (128, 128, 4, 8, 3)),
        (128, 28672, 4096, (128, 256, 1, 8, 3)),  # 112 programs of 256 weight rows
        (256, 4096, 14336, (128, 128, 2, 8, 3)),
        (256, 28672, 4096, (256, 128, 1, 8, 3)),  # 224 programs of 256 tokens
        (100, 6144, 4096, (128, 128, 2, 8, 3)),
        (256, 4096 + 64, 4096, (128, 64, 1, 4, 3)),  # N no multiple of 128
    ],
)
def test_without_a_table_int4_takes_gluon_from_17_to_256_rows(m, n, k, launch):
    """A GPU without a table (a GH200: sm_90, 132 SMs, not measured) and shapes the table lacks: the default rule's Gluon launch, which
    the dispatch replaces by our Triton program where Gluon cannot run."""
    tiles = choose_tiles(m, n, k, "int4", 128, 132, "NVIDIA GH200 480GB")
    assert tiles.backend == "gluon" and tiles.graph_safe
    assert (tiles.block_m, tiles.block_n, tiles.split_k, tiles.num_warps, tiles.num_stages) == launch
    assert (tiles.block_m, tiles.block_n, tiles.num_warps, tiles.num_stages) in quant_tile_specs.INT4_GLUON
    # a launch shape the sweep times at the rows' bucket (and int4_gluon_compile_sm90.py compiles)
    assert tiles in quant_tiles.gluon_candidates(quant_tiles.row_bucket(m), n, k, 132)
    for rows in (1, 16, 300):
        assert choose_tiles(rows, n, k, "int4", 128, 132, "NVIDIA GH200 480GB").backend != "gluon"
    assert choose_tiles(m, n, k, "int8", 0, 132, "NVIDIA GH200 480GB").backend == "triton"
    assert choose_tiles(m, n, k, "int4", 128, 132, "", program_only=True).backend == "triton"


def test_gluon_runs_only_on_bf16_cuda_tensors_with_groups_of_128():
    x = torch.zeros(4, 256, dtype=torch.bfloat16)
    scales = torch.zeros(128, 2, dtype=torch.bfloat16)
    assert not fits(x, scales, 128, 64)  # not CUDA
    assert not fits(torch.zeros(4, 256, dtype=torch.bfloat16, device="meta"), scales, 128, 64)
    assert not fits(x, scales, 64, 64)


@pytest.mark.parametrize("m", [17, 32, 64, 100, 256])
def test_gluon_candidates_fit_the_rows_and_the_weight(m):
    n, k = 6144, 4096
    found = quant_tiles.gluon_candidates(m, n, k, 132)
    assert found and all(t.backend == "gluon" and n % t.block_n == 0 and t.block_k == 128 for t in found)
    assert all(16 <= t.block_m <= max(16, m) and 4 * t.block_m >= min(m, 256) for t in found)
    assert {t.split_k for t in found if t.block_m <= 64} > {1}  # about two waves
    wide = [t for t in found if t.block_m > 64]
    assert all(t.split_k == 1 or (n // t.block_n) * -(-m // t.block_m) * t.split_k <= 2 * 132 for t in wide)
    swept = quant_tiles.candidates("int4", m, n, k, 132, gluon=True)
    assert set(found) <= set(swept) and not any(
        t.backend == "gluon" for t in quant_tiles.candidates("int4", m, n, k, 132)
    )


def test_no_gluon_candidates_outside_17_to_256_rows():
    for m in (1, 16, 300):
        assert not any(t.backend == "gluon" for t in quant_tiles.candidates("int4", m, 6144, 4096, 132, gluon=True))
    assert not any(t.backend == "gluon" for t in quant_tiles.candidates("int8", 64, 6144, 4096, 132, gluon=True))


@pytest.mark.slow  # compiles the table's Gluon launch shapes for sm_90 with ptxas
def test_the_tables_gluon_launch_shapes_compile_for_sm90_and_the_dispatch_launches_them():
    stdout = run_sm90_script("int4_gluon_compile_sm90.py", timeout=900)
    lines = [line for line in stdout.splitlines() if line.startswith("gluon ")]
    assert len(lines) >= 4 and all(line.endswith(" ok") for line in lines), stdout
    dispatch = [line for line in stdout.splitlines() if line.startswith("dispatch ")]
    assert len(dispatch) == 3 and all(line.endswith(" ok") for line in dispatch), stdout


def test_two_planes_of_mmas_stay_in_flight_only_on_wide_token_tiles():
    """Tiles of 128 tokens and more (up to 128 weight rows) leave two planes of MMAs running; the narrower
    ones measured slower with two, and 128 tokens by 256 weight rows would spill (the sm_90 compile test
    checks each launch's waits against this)."""
    from model_optimizer.runtime.kernels.int4_gluon import in_flight

    assert [in_flight(m, n) for m, n in ((256, 128), (256, 64), (128, 128), (128, 64))] == [2, 2, 2, 2]
    assert [in_flight(m, n) for m, n in ((128, 256), (64, 128), (32, 64), (16, 128))] == [1, 1, 1, 1]
