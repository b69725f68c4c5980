"""gpt-oss's experts in the fused MoE kernel (through the Triton interpreter on the CPU) and in the torch loop:
per-expert biases and the clamped SwiGLU, against a plain rendering of transformers' GptOssExperts on its
own layout (gate_up_proj (experts, hidden, 2I) with gate and up interleaved, down_proj (experts, I, hidden))
that shares no code with either path."""

import pytest
import torch

from model_optimizer.runtime.kernels.fused_moe import fused_moe
from model_optimizer.runtime.kernels.moe_reference import ClampedSwiglu, fused_moe_ref
from model_optimizer.runtime.kernels.moe_tiles import GemmTiles, MoeTiles

ACT = ClampedSwiglu(alpha=1.702, limit=7.0)


def _gpt_oss_experts(num_experts, hidden, intermediate, seed, scale=3.0):
    """transformers' layout, with weights wide enough that the clamps at 7 bite for some values."""
    gen = torch.Generator().manual_seed(seed)
    gate_up = torch.randn(num_experts, hidden, 2 * intermediate, generator=gen) * scale / hidden**0.5
    gate_up_bias = torch.randn(num_experts, 2 * intermediate, generator=gen)
    down = torch.randn(num_experts, intermediate, hidden, generator=gen) / intermediate**0.5
    down_bias = torch.randn(num_experts, hidden, generator=gen)
    return gate_up, gate_up_bias, down, down_bias


def _transformers_formula(x, gate_up, gate_up_bias, down, down_bias, ids, weights, alpha=1.702, limit=7.0):
    out = torch.zeros_like(x)
    for t in range(x.shape[0]):
        for k in range(ids.shape[1]):
            e = int(ids[t, k])
            h = x[t] @ gate_up[e] + gate_up_bias[e]
            gate, up = h[::2].clamp(max=limit), h[1::2].clamp(-limit, limit)
            o = ((up + 1) * (gate * torch.sigmoid(gate * alpha))) @ down[e] + down_bias[e]
            out[t] += o * weights[t, k]
    return out


def _engine_layout(gate_up, gate_up_bias, down, down_bias):
    """What models/gpt_oss.py loads: w13 rows [gate; up] (experts, 2I, hidden), w2 (experts, hidden, I)."""
    w13 = torch.cat([gate_up[..., ::2], gate_up[..., 1::2]], dim=-1).transpose(1, 2).contiguous()
    b13 = torch.cat([gate_up_bias[:, ::2], gate_up_bias[:, 1::2]], dim=-1).contiguous()
    return w13, b13, down.transpose(1, 2).contiguous(), down_bias.contiguous()


def _routing(num_tokens, num_experts, top_k, seed):
    gen = torch.Generator().manual_seed(seed + 100)
    logits = torch.randn(num_tokens, num_experts, generator=gen)
    values, ids = logits.topk(top_k, dim=-1)
    return values.softmax(dim=-1), ids


CASES = [(1, 4, 32, 16, 2), (9, 8, 48, 24, 4), (33, 5, 32, 40, 3)]  # tokens, experts, hidden, intermediate, top_k


@pytest.mark.parametrize(("num_tokens", "num_experts", "hidden", "intermediate", "top_k"), CASES)
def test_torch_loop_and_kernel_match_transformers_formula(num_tokens, num_experts, hidden, intermediate, top_k):
    gate_up, b_gu, down, b_d = _gpt_oss_experts(num_experts, hidden, intermediate, seed=num_tokens)
    x = torch.randn(num_tokens, hidden, generator=torch.Generator().manual_seed(7))
    weights, ids = _routing(num_tokens, num_experts, top_k, seed=num_tokens)
    expected = _transformers_formula(x, gate_up, b_gu, down, b_d, ids, weights)
    w13, b13, w2, b2 = _engine_layout(gate_up, b_gu, down, b_d)
    ref = fused_moe_ref(x, w13, w2, weights, ids, b13, b2, ACT)
    assert torch.allclose(ref, expected, atol=1e-5, rtol=1e-5)
    out = fused_moe(x, w13, w2, weights, ids, w13_bias=b13, w2_bias=b2, activation=ACT)
    assert torch.allclose(out, expected, atol=1e-4, rtol=1e-4)
    # each piece matters: without the biases, or with SiLU, the result is another one
    assert not torch.allclose(fused_moe(x, w13, w2, weights, ids, activation=ACT), expected, atol=1e-2)
    assert not torch.allclose(fused_moe(x, w13, w2, weights, ids, w13_bias=b13, w2_bias=b2), expected, atol=1e-2)


def test_the_clamps_bite_in_the_kernel():
    """Scaled-up weights push gate and up far past 7: the kernel's clamps must match the formula's."""
    gate_up, b_gu, down, b_d = _gpt_oss_experts(4, 32, 16, seed=3, scale=30.0)
    x = torch.randn(6, 32, generator=torch.Generator().manual_seed(8))
    weights, ids = _routing(6, 4, 2, seed=3)
    w13, b13, w2, b2 = _engine_layout(gate_up, b_gu, down, b_d)
    h = x @ gate_up[0] + b_gu[0]
    assert (h > 7).any() and (h < -7).any()
    expected = _transformers_formula(x, gate_up, b_gu, down, b_d, ids, weights)
    out = fused_moe(x, w13, w2, weights, ids, w13_bias=b13, w2_bias=b2, activation=ACT)
    assert torch.allclose(out, expected, atol=1e-4, rtol=1e-4)
    unclamped = _transformers_formula(x, gate_up, b_gu, down, b_d, ids, weights, limit=float("inf"))
    assert not torch.allclose(out, unclamped, atol=1e-2)


def test_bf16_and_other_tiles_and_unsummed_rows():
    gate_up, b_gu, down, b_d = _gpt_oss_experts(6, 64, 32, seed=4)
    x = torch.randn(20, 64, generator=torch.Generator().manual_seed(9))
    weights, ids = _routing(20, 6, 4, seed=4)
    expected = _transformers_formula(x, gate_up, b_gu, down, b_d, ids, weights)
    w13, b13, w2, b2 = (t.to(torch.bfloat16) for t in _engine_layout(gate_up, b_gu, down, b_d))
    tiles = MoeTiles(16, GemmTiles(16, 32, 4, 2), GemmTiles(32, 16, 4, 2))
    out = fused_moe(x.bfloat16(), w13, w2, weights, ids, tiles=tiles, w13_bias=b13, w2_bias=b2, activation=ACT)
    assert (out.float() - expected).norm() / expected.norm() < 2e-2
    rows = fused_moe(x.bfloat16(), w13, w2, weights, ids, summed=False, w13_bias=b13, w2_bias=b2, activation=ACT)
    assert torch.allclose(rows.view(20, 4, 64).float().sum(1), out.float(), atol=5e-2)


def test_expert_parallel_ids_of_other_ranks_add_nothing_not_even_a_bias():
    gate_up, b_gu, down, b_d = _gpt_oss_experts(4, 32, 16, seed=5)
    x = torch.randn(5, 32, generator=torch.Generator().manual_seed(10))
    weights, ids = _routing(5, 4, 2, seed=5)
    w13, b13, w2, b2 = _engine_layout(gate_up, b_gu, down, b_d)
    local = ids.clone()
    local[local >= 2] = -1  # experts 2 and 3 live on another rank
    out = fused_moe(x, w13[:2], w2[:2], weights, local, w13_bias=b13[:2], w2_bias=b2[:2], activation=ACT)
    ref = fused_moe_ref(x, w13[:2], w2[:2], weights, local, b13[:2], b2[:2], ACT)
    assert torch.allclose(out, ref, atol=1e-5)
    kept = weights.masked_fill(ids >= 2, 0.0)
    assert torch.allclose(out, _transformers_formula(x, gate_up, b_gu, down, b_d, ids, kept), atol=1e-4)


def test_clamped_swiglu_at_gpt_oss_defaults():
    gate_up = torch.linspace(-12, 12, 40).reshape(2, 20)
    gate, up = gate_up.chunk(2, dim=-1)
    expected = (up.clamp(-7, 7) + 1) * gate.clamp(max=7) * torch.sigmoid(1.702 * gate.clamp(max=7))
    assert torch.allclose(ClampedSwiglu()(gate, up), expected)
