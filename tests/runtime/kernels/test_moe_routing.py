"""The softmax top-k routing kernel and the sum over k against torch, through the Triton interpreter."""

import pytest
import torch

from model_optimizer.runtime.kernels.fused_moe import sum_over_k
from model_optimizer.runtime.kernels.moe_routing import MAX_EXPERTS, softmax_topk_kernel
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
    assert got.dtype == torch.bfloat16  # (the interpreter rounds to bf16 toward zero: one ulp of slack)
    torch.testing.assert_close(got.float(), want, rtol=2**-7, atol=1e-6)
