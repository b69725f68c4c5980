"""The softmax top-k routing kernel and the sum over k against torch, through the Triton interpreter."""

import pytest
import torch

from model_optimizer.runtime.kernels.fused_moe import sum_over_k
from model_optimizer.runtime.kernels.moe_routing import MAX_EXPERTS, RouteTiles, softmax_topk_kernel
from model_optimizer.runtime.layers.moe import MAX_ROUTING_KERNEL_EXPERTS, softmax_topk

TOKEN_COUNTS = [1, 2, 5, 13, 40]


def _logits(num_tokens: int, num_experts: int, ties: bool, seed: int) -> torch.Tensor:
    gen = torch.Generator().manual_seed(seed)
    if ties:  # a few distinct values: most rows tie at the k-th place, many at the first
        return torch.randint(-3, 3, (num_tokens, num_experts), generator=gen).float() / 2
    return torch.randn(num_tokens, num_experts, generator=gen) * 2


def _check(logits: torch.Tensor, top_k: int, renormalize: bool) -> None:
    weights, ids = softmax_topk_kernel(logits, top_k, renormalize)
    want_w, _ = softmax_topk(logits, top_k, renormalize)
    # softmax is monotonic: the experts in descending order, ties to the lowest id (torch.topk's tie order is
    # unspecified, so its ids are not the yardstick; its weights are, as tied weights are equal)
    want_ids = torch.sort(logits.float(), dim=-1, descending=True, stable=True).indices[:, :top_k]
    assert weights.dtype == torch.float32 and ids.dtype == torch.int64
    assert torch.equal(ids, want_ids)
    torch.testing.assert_close(weights, want_w, rtol=4e-6, atol=1e-7)


@pytest.mark.parametrize("renormalize", [False, True])
@pytest.mark.parametrize("top_k", [1, 2, 4, 8])
@pytest.mark.parametrize("num_experts", [8, 60, 64, 128])
def test_routing_kernel_equals_softmax_topk(num_experts, top_k, renormalize):
    case = num_experts + top_k + renormalize
    num_tokens = TOKEN_COUNTS[case % len(TOKEN_COUNTS)]
    for ties in (False, True):
        _check(_logits(num_tokens, num_experts, ties, seed=case), top_k, renormalize)


@pytest.mark.parametrize(("num_tokens", "num_experts"), [(300, 128), (40, 256)])
def test_routing_kernel_at_many_tokens_and_bf16_logits(num_tokens, num_experts):
    """The router's logits come in the model dtype: bf16 ties often, and the kernel casts in-register."""
    logits = _logits(num_tokens, num_experts, ties=False, seed=3).bfloat16()
    _check(logits, 8, renormalize=True)
    wide = torch.cat([logits, logits], dim=1)[:40, :num_experts]  # rows of 2 * experts: a stride other than the width
    _check(wide, 4, renormalize=False)


def test_routing_kernel_with_every_expert_taken_and_no_tokens():
    logits = _logits(5, 8, ties=True, seed=1)
    _check(logits, 8, renormalize=True)  # k = experts: the whole row, sorted; renormalized weights sum to 1
    weights, ids = softmax_topk_kernel(torch.zeros(0, 64), 4, True)
    assert weights.shape == ids.shape == (0, 4)


def test_routing_kernel_rejects_what_does_not_fit_one_block():
    with pytest.raises(ValueError, match="1 <= top_k <= experts <= 256"):
        softmax_topk_kernel(torch.zeros(2, 300), 8, True)
    with pytest.raises(ValueError, match="top_k"):
        softmax_topk_kernel(torch.zeros(2, 8), 9, True)
    assert MAX_ROUTING_KERNEL_EXPERTS == MAX_EXPERTS  # the layer's limit is the kernel's


@pytest.mark.parametrize(("num_tokens", "top_k", "hidden"), [(1, 8, 2048), (7, 2, 96), (3, 1, 64), (0, 4, 32)])
def test_sum_over_k_adds_each_tokens_rows_in_k_order(num_tokens, top_k, hidden):
    gen = torch.Generator().manual_seed(num_tokens)
    rows = torch.randn(num_tokens * top_k, hidden, generator=gen).bfloat16().float()
    per_token = rows.view(num_tokens, top_k, hidden)
    want = per_token[:, 0]
    for k in range(1, top_k):
        want = want + per_token[:, k]
    got = sum_over_k(rows, num_tokens, top_k)
    assert got.shape == (num_tokens, hidden) and torch.equal(got, want)  # float32: the same additions
    got = sum_over_k(rows.bfloat16(), num_tokens, top_k)  # accumulated in float32, rounded once
    assert got.dtype == torch.bfloat16 and torch.equal(got, want.bfloat16())


@pytest.mark.parametrize(
    ("num_tokens", "hidden", "num_experts", "top_k", "renormalize"),
    [(1, 2048, 128, 8, True), (3, 512, 60, 4, False), (4, 96, 8, 2, True), (2, 1000, 16, 1, False)],
)
def test_norm_route_is_the_norm_the_matvec_and_the_routing(num_tokens, hidden, num_experts, top_k, renormalize):
    """The post-attention norm, the router's matvec and the routing in one launch give what the three
    separate steps give: the norm's outputs as add_rms_norm's, the logits rounded to bf16 as the
    matvec returns them, the routing as softmax_topk_kernel's (the matvec's sum order may differ:
    a logit one bf16 unit off at most, so the ids agree on these random rows)."""
    from model_optimizer.runtime.kernels import fused_ops
    from model_optimizer.runtime.kernels.moe_routing import norm_route

    gen = torch.Generator().manual_seed(hidden + num_experts)
    x = torch.randn(num_tokens, hidden, generator=gen).bfloat16()
    residual = torch.randn(num_tokens, hidden, generator=gen).bfloat16()
    norm_w = (1 + 0.2 * torch.randn(hidden, generator=gen)).bfloat16()
    router = (torch.randn(num_experts, hidden, generator=gen) / hidden**0.5).bfloat16()
    normed, total, weights, ids = norm_route(x, residual, norm_w, 1e-6, router, top_k, renormalize)
    want_normed, want_total = fused_ops.add_rms_norm(x, residual, norm_w, 1e-6)
    assert torch.equal(total, want_total)
    assert (normed.float() - want_normed.float()).abs().le(want_normed.float().abs() * 2**-7).all()
    logits = (normed.float() @ router.float().T).bfloat16()
    want_w, want_ids = softmax_topk_kernel(logits, top_k, renormalize)
    assert ids.shape == (num_tokens, top_k) and torch.equal(ids, want_ids)
    torch.testing.assert_close(weights, want_w, rtol=1e-2, atol=1e-3)
    again = norm_route(x, residual, norm_w, 1e-6, router, top_k, renormalize)  # the counters were reset
    assert all(torch.equal(a, b) for a, b in zip(again, (normed, total, weights, ids)))
    for tiles in (RouteTiles(8, 8, 1), RouteTiles(32, 1, 2), RouteTiles(16, 3, 4)):  # other launch shapes, same results
        other = norm_route(x, residual, norm_w, 1e-6, router, top_k, renormalize, tiles)
        assert torch.equal(other[1], total) and torch.equal(other[3], ids)
        torch.testing.assert_close(other[2], weights, rtol=1e-2, atol=1e-3)


def test_route_tiles_from_the_environment(monkeypatch):
    from model_optimizer.runtime.kernels.moe_routing import ROUTE_TILES_ENV, default_route_tiles

    assert RouteTiles.parse("8,2,1") == RouteTiles(8, 2, 1)
    with pytest.raises(ValueError, match="BLOCK_E,SPLITS,NUM_WARPS"):
        RouteTiles.parse("8,128,2,1")
    default_route_tiles.cache_clear()
    monkeypatch.setenv(ROUTE_TILES_ENV, "32,4,2")
    assert default_route_tiles(2048, 128) == RouteTiles(32, 4, 2)
    default_route_tiles.cache_clear()
    monkeypatch.delenv(ROUTE_TILES_ENV)
    assert default_route_tiles(2048, 128) == RouteTiles(4, 8, 1)  # the H200's fastest (README)
    assert default_route_tiles(4096, 8, 4) == RouteTiles(16, 4, 4)


def test_norm_route_declines_what_it_does_not_take():
    from model_optimizer.runtime.kernels.moe_routing import MAX_NORM_ROUTE_ROWS, norm_route

    def args(rows=1, hidden=64, experts=8, dtype=torch.bfloat16):
        x = torch.zeros(rows, hidden, dtype=dtype)
        return x, x.clone(), torch.ones(hidden, dtype=dtype), 1e-6, torch.zeros(experts, hidden, dtype=dtype)

    assert norm_route(*args(), 2, True) is not None
    assert norm_route(*args(rows=MAX_NORM_ROUTE_ROWS + 1), 2, True) is None  # a prefill: the separate steps
    assert norm_route(*args(dtype=torch.float32), 2, True) is None
    assert norm_route(*args(experts=300), 8, True) is None
    assert norm_route(*args(), 9, True) is None  # more picks than experts


@pytest.mark.parametrize("num_tokens", [1, 3, 6])
def test_moe_block_with_kernels_matches_its_torch_path(monkeypatch, num_tokens):
    """A sparse layer's post-attention norm + block, then the next layer's norm, with the GPU kernels (here
    through the interpreter): the router fused with the norm up to MAX_NORM_ROUTE_ROWS tokens, the expert
    rows summed inside the next norm (layers/expert_rows.py). Same routing, outputs as the torch path's."""
    from model_optimizer.runtime.kernels import aot, moe_routing, triton_kernel
    from model_optimizer.runtime.layers.expert_rows import ExpertRows
    from model_optimizer.runtime.layers.moe import FusedExperts, SparseMoeBlock, TopKRouter
    from model_optimizer.runtime.layers.norm import RMSNorm

    torch.manual_seed(num_tokens)
    hidden, experts, inter = 64, 8, 32
    block = SparseMoeBlock(TopKRouter(hidden, experts, 2, True), FusedExperts(experts, hidden, inter))
    with torch.no_grad():
        for p in block.parameters():
            p.normal_(0, 0.2)
    post_norm, next_norm = RMSNorm(hidden), RMSNorm(hidden)
    for m in (block, post_norm, next_norm):
        m.to(torch.bfloat16)
    h, residual = torch.randn(num_tokens, hidden).bfloat16(), torch.randn(num_tokens, hidden).bfloat16()
    with torch.no_grad():
        want_out, want_res = block.forward_after_norm(h, residual, post_norm)  # CPU: torch ops
        want = next_norm(want_out, want_res)
        fused = []
        real = moe_routing.norm_route
        monkeypatch.setattr(moe_routing, "norm_route", lambda *a: fused.append(real(*a)) or fused[-1])
        triton_kernel.cache_clear()  # it holds the functions looked up before
        monkeypatch.setattr(aot, "on_gpu", lambda tensor: True)
        monkeypatch.setattr(aot, "device_facts", lambda index: ("interpreter", 132, (9, 0)))  # no table: defaults
        out, res = block.forward_after_norm(h, residual, post_norm)
        got = next_norm(out, res)
    triton_kernel.cache_clear()
    assert isinstance(out, ExpertRows) and out.rows.shape == (num_tokens * 2, hidden)
    assert (fused[0] is not None) == (num_tokens <= moe_routing.MAX_NORM_ROUTE_ROWS)
    assert torch.equal(res, want_res)
    for a, b in zip(got, want):
        torch.testing.assert_close(a.float(), b.float(), rtol=0.05, atol=0.05)
