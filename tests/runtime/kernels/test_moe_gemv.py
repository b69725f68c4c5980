"""The one-token MoE (two matrix-vector products) against the per-expert reference, through the interpreter."""

import pytest
import torch

from model_optimizer.runtime.kernels import fused_moe as fm
from model_optimizer.runtime.kernels.moe_gemv import GEMV_ENV, GemvTiles, moe_one_token
from model_optimizer.runtime.kernels.moe_reference import fused_moe_ref
from model_optimizer.runtime.layers.moe import softmax_topk


def _inputs(hidden, intermediate, num_experts, top_k, dtype, seed=0):
    gen = torch.Generator().manual_seed(seed)
    x = torch.randn(1, hidden, generator=gen).to(dtype)
    w13 = (torch.randn(num_experts, 2 * intermediate, hidden, generator=gen) / hidden**0.5).to(dtype)
    w2 = (torch.randn(num_experts, hidden, intermediate, generator=gen) / intermediate**0.5).to(dtype)
    weights, ids = softmax_topk(torch.randn(1, num_experts, generator=gen), top_k, renormalize=True)
    return x, w13, w2, weights, ids


@pytest.mark.parametrize(
    ("hidden", "intermediate", "num_experts", "top_k", "dtype", "tiles"),
    [
        (64, 32, 8, 2, torch.float32, GemvTiles(16, 16, 32)),  # K a multiple of the step
        (40, 24, 6, 3, torch.float32, GemvTiles(16, 16, 32)),  # K and N masked
        (48, 20, 4, 1, torch.float32, GemvTiles(8, 32, 16)),  # top-1
        (64, 48, 16, 8, torch.bfloat16, None),  # the default tiles, wider than the shape
    ],
)
def test_one_token_gemv_matches_the_reference(hidden, intermediate, num_experts, top_k, dtype, tiles):
    x, w13, w2, weights, ids = _inputs(hidden, intermediate, num_experts, top_k, dtype, seed=top_k)
    got = moe_one_token(x, w13, w2, weights, ids, tiles)
    want = fused_moe_ref(x.float(), w13.float(), w2.float(), weights, ids)
    assert got.shape == x.shape and got.dtype == dtype
    tol = dict(atol=1e-5, rtol=1e-5) if dtype == torch.float32 else dict(atol=2e-2, rtol=2e-2)
    torch.testing.assert_close(got.float(), want, **tol)


def test_fused_moe_takes_it_only_when_asked_and_all_ids_are_local(monkeypatch):
    x, w13, w2, weights, ids = _inputs(64, 32, 8, 2, torch.float32)
    calls = []
    monkeypatch.setattr(fm.moe_gemv, "moe_one_token", lambda *a: calls.append(a) or moe_one_token(*a))
    want = fused_moe_ref(x, w13, w2, weights, ids)
    torch.testing.assert_close(fm.fused_moe(x, w13, w2, weights, ids, all_ids_local=True), want, atol=1e-5, rtol=1e-5)
    assert not calls  # off by default
    monkeypatch.setenv(GEMV_ENV, "1")
    fm.fused_moe(x, w13, w2, weights, ids)  # ids may be another rank's: not taken
    assert not calls
    torch.testing.assert_close(fm.fused_moe(x, w13, w2, weights, ids, all_ids_local=True), want, atol=1e-5, rtol=1e-5)
    assert len(calls) == 1
