"""benchmarks/int4_mma_variants.py's experimental int4 programs compute the reference's product (Triton
interpreter, small shapes): the H200 timings in the README compare launches that give the same result."""

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
