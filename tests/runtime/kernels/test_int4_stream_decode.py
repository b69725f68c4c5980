"""The balanced ("stream-K") int4 launch of benchmarks/int4_stream_decode.py computes the dequantizing
reference's product (Triton interpreter, small shapes), whichever way its program count cuts the
(tile, 128-column block) work units: tiles whole in one program, or shared by two, three or more whose
float32 partials the last one adds; and its per-tile counters are zero after every launch, so a second
launch (a CUDA-graph replay) gives the same bits."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch

from model_optimizer.runtime.kernels.quant_reference import dequantize_int4, pack_int4_planes
from tests.runtime.kernels.paged_batches import relative_error

pytest.importorskip("triton")
sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "benchmarks"))
from int4_stream_decode import StreamVariant, _counters, stream_int4  # noqa: E402

TOLERANCE = {torch.float32: 1e-5, torch.bfloat16: 1e-2}
"""test_quant_linear's bounds on ||out - ref|| / ||ref|| for the int4 kernels."""
N, K, GROUP = 256, 512, 128
N64 = StreamVariant(64, 4)
"""64-row tiles: N x K above is 4 tiles x 4 blocks, 16 work units."""


def _weights(n: int, k: int, group: int, dtype: torch.dtype, seed: int):
    """(planes, scales, zeros, the reference's float64 weight) of random int4 codes."""
    gen = torch.Generator().manual_seed(seed)
    q = torch.randint(0, 16, (n, k), dtype=torch.int32, generator=gen)
    scales = (torch.rand(n, k // group, generator=gen) * 0.02 + 0.001).to(dtype)
    zeros = torch.randint(0, 16, (n, k // group), dtype=torch.uint8, generator=gen)
    planes = pack_int4_planes(q)
    return planes, scales, zeros, dequantize_int4(planes, scales, zeros, group, torch.float64, "planes")


def _sharers(num_tiles: int, blocks: int, programs: int) -> set[int]:
    """How many programs work on each tile when `programs` split the units evenly (the kernel's rule)."""
    units = num_tiles * blocks
    starts = [p * units // programs for p in range(programs + 1)]
    return {sum(starts[p] < (t + 1) * blocks and starts[p + 1] > t * blocks for p in range(programs)) for t in range(num_tiles)}  # fmt: skip


PROGRAM_COUNTS = (1, 3, 4, 8, 12, 100)
"""One program for all; 5-6 units a program (whole tiles and tiles of two); one tile each; two a tile;
three a tile; more programs than units (capped at 16: one block each, four a tile)."""


def test_the_program_counts_cover_tiles_of_one_two_and_three_programs():
    covered = set().union(*(_sharers(N // 64, K // 128, p) for p in PROGRAM_COUNTS[:-1]))
    assert {1, 2, 3} <= covered


def _assert_matches(m: int, dtype: torch.dtype, variant: StreamVariant, programs: int, seed: int) -> torch.Tensor:
    planes, scales, zeros, w = _weights(N, K, GROUP, dtype, seed)
    x = torch.randn(m, K, generator=torch.Generator().manual_seed(seed + 1)).to(dtype)
    out = stream_int4(x, planes, scales, zeros, GROUP, variant, programs)
    assert out.shape == (m, N) and out.dtype == dtype
    assert relative_error(out, x.double() @ w.T) < TOLERANCE[dtype]
    assert not _counters.by_device[x.device].any()
    return out


@pytest.mark.parametrize("m", [1, 3, 16])
@pytest.mark.parametrize("programs", PROGRAM_COUNTS)
def test_balanced_launch_matches_the_dequantizing_reference(m, programs):
    _assert_matches(m, torch.float32, N64, programs, seed=m + programs)


@pytest.mark.parametrize("variant", [StreamVariant(64, 2, accs=4), StreamVariant(128, 4)], ids=lambda v: v.name)
@pytest.mark.parametrize("programs", [3, 12])
def test_other_variants_match_the_dequantizing_reference(variant, programs):
    """An accumulator per plane; 128-row tiles (2 tiles x 4 blocks: 12 programs cap at 8, four a tile)."""
    _assert_matches(5, torch.float32, variant, programs, seed=programs)


@pytest.mark.parametrize("programs", [3, 12])
def test_bf16_activations(programs):
    _assert_matches(3, torch.bfloat16, N64, programs, seed=7)


def test_groups_of_several_blocks():
    """Groups of 256 columns (two blocks a zero point and scale); 3 tiles x 8 blocks cut into 5 and 7 shares."""
    n, k, group = 384, 1024, 256
    planes, scales, zeros, w = _weights(n, k, group, torch.float32, seed=3)
    x = torch.randn(4, k, generator=torch.Generator().manual_seed(4))
    for programs in (5, 7):
        out = stream_int4(x, planes, scales, zeros, group, StreamVariant(128, 4), programs)
        assert relative_error(out, x.double() @ w.T) < TOLERANCE[torch.float32]


@pytest.mark.parametrize("programs", [8, 12])
def test_a_second_launch_finds_the_counters_reset_and_gives_the_same_bits(programs):
    """As a CUDA-graph replay of the launch would: the same inputs again, after the last sharers zeroed the
    counters; float32 partials added in program order, so the bits match too."""
    first = _assert_matches(16, torch.float32, N64, programs, seed=11)
    second = _assert_matches(16, torch.float32, N64, programs, seed=11)
    assert torch.equal(first, second)


def test_rejects_what_it_cannot_serve():
    planes, scales, zeros, _ = _weights(N, K, GROUP, torch.float32, seed=0)
    with pytest.raises(ValueError, match="1 to 16 rows"):
        stream_int4(torch.randn(17, K), planes, scales, zeros, GROUP, N64, 4)
    with pytest.raises(ValueError, match="multiple of the tile"):
        stream_int4(torch.randn(2, K), planes[:96], scales[:96], zeros[:96], GROUP, N64, 4)
    with pytest.raises(ValueError, match="activations' dtype"):
        stream_int4(torch.randn(2, K), planes, scales.to(torch.bfloat16), zeros, GROUP, N64, 4)
