"""The experimental int4 programs of benchmarks/int4_mma_variants.py and benchmarks/int4_row_planes.py
compute the reference's product (Triton interpreter, small shapes): the H200 timings in the README
compare launches that give the same result."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch

from model_optimizer.runtime.kernels.quant_reference import pack_int4_planes, w4a16_linear_ref

pytest.importorskip("triton")
sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "benchmarks"))
from int4_mma_variants import MODES, variant  # noqa: E402


@pytest.mark.parametrize("mode", sorted(MODES))
def test_every_variant_matches_the_dequantizing_reference(mode):
    torch.manual_seed(0)
    n, k, m, group = 64, 256, 5, 128  # 5 rows: the masked tail of a 16-row tile
    q = torch.randint(0, 16, (n, k), dtype=torch.int32)
    scales = (torch.rand(n, k // group) * 0.02 + 0.001).to(torch.bfloat16)
    zeros = torch.randint(0, 16, (n, k // group), dtype=torch.uint8)
    planes = pack_int4_planes(q)
    x = torch.randn(m, k).to(torch.bfloat16)
    ref = w4a16_linear_ref(x, planes, scales, zeros, group, packing="planes").float()
    out = variant(x, planes.view(torch.int16), scales, zeros, group, mode, 16, 32, 4, 2).float()
    assert out.shape == (m, n)
    torch.testing.assert_close(out, ref, rtol=1e-2, atol=1e-2 * ref.abs().max().item())


def test_row_planes_program_matches_the_dequantizing_reference():
    """benchmarks/int4_row_planes.py: four rows a 16-bit lane, four independent dots a K tile."""
    from int4_row_planes import pack_row_planes, row_planes

    torch.manual_seed(1)
    n, k, m, group = 256, 256, 5, 128  # one block of 4 x 64 rows; 5 rows: the masked tail of a 16-row tile
    q = torch.randint(0, 16, (n, k), dtype=torch.int32)
    scales = (torch.rand(n, k // group) * 0.02 + 0.001).to(torch.bfloat16)
    zeros = torch.randint(0, 16, (n, k // group), dtype=torch.uint8)
    x = torch.randn(m, k).to(torch.bfloat16)
    ref = w4a16_linear_ref(x, pack_int4_planes(q), scales, zeros, group, packing="planes").float()
    lanes = pack_row_planes(q, 64)
    assert lanes.shape == (n // 4, k) and lanes.dtype == torch.int16
    assert ((lanes[3, 7].item() >> 8) & 0xF) == q[2 * 64 + 3, 7].item()  # nibble 2 of packed row 3: row 131
    out = row_planes(x, lanes, scales, zeros, group, 64, 16, 64, 4, 2).float()
    torch.testing.assert_close(out, ref, rtol=1e-2, atol=1e-2 * ref.abs().max().item())
