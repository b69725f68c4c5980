"""The fused element-wise Triton kernels against the eager functions the CPU runs, through the
Triton interpreter (tests/runtime/kernels/conftest.py): RMSNorm, add + RMSNorm, SiLU-and-mul.

The eager functions round to the model dtype where transformers does (the residual sum, the
normalized value before the weight, silu before the product) and so do the kernels: in half
precision the results agree bit for bit except where the float32 sum of squares, added in another
order, lands a normalized value on the other side of a rounding boundary: one unit in the last place.
"""

import pytest
import torch

from model_optimizer.runtime.kernels import fused_ops
from model_optimizer.runtime.layers import fusion
from model_optimizer.runtime.layers.activation import SiluAndMul, silu_and_mul
from model_optimizer.runtime.layers.norm import RMSNorm, _add_rms_norm, _rms_norm

DTYPES = [torch.float32, torch.float16, torch.bfloat16]
HIDDEN = [8, 96, 100, 256]  # 100 is not a power of two (masked tail), 8 a single 16-byte piece of half
TOKENS = [1, 3, 17]


def _randn(*shape, dtype, seed, scale=3.0):
    gen = torch.Generator().manual_seed(seed)
    return (scale * torch.randn(*shape, generator=gen)).to(dtype)


def _close(got: torch.Tensor, want: torch.Tensor) -> None:
    """Same dtype and shape; float32 to 1e-5; half precision at most one unit in the last place off
    and nearly all equal."""
    assert got.dtype == want.dtype and got.shape == want.shape
    if want.dtype == torch.float32:
        torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-5)
        return
    info = torch.finfo(want.dtype)
    ulp = info.eps * torch.exp2(torch.floor(torch.log2(want.float().abs().clamp_min(info.tiny))))
    assert ((got.float() - want.float()).abs() <= ulp).all(), (got.float() - want.float()).abs().max()
    assert (got == want).float().mean() >= 0.95


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("hidden", HIDDEN)
@pytest.mark.parametrize("num_tokens", TOKENS)
def test_add_rms_norm_matches_eager(dtype, hidden, num_tokens):
    x = _randn(num_tokens, hidden, dtype=dtype, seed=hidden)
    residual = _randn(num_tokens, hidden, dtype=dtype, seed=hidden + 1)
    weight = (1 + _randn(hidden, dtype=torch.float32, seed=2, scale=0.3)).to(dtype)
    want_out, want_sum = _add_rms_norm.__wrapped__(x, residual, weight, 1e-6)
    got_out, got_sum = fused_ops.add_rms_norm(x, residual, weight, 1e-6)
    assert torch.equal(got_sum, want_sum)  # one rounding of an exact float32 sum, as eager's
    _close(got_out, want_out)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("hidden", HIDDEN)
@pytest.mark.parametrize("num_tokens", TOKENS)
def test_rms_norm_matches_eager(dtype, hidden, num_tokens):
    x = _randn(num_tokens, hidden, dtype=dtype, seed=hidden + 7)
    weight = (1 + _randn(hidden, dtype=torch.float32, seed=3, scale=0.3)).to(dtype)
    _close(fused_ops.rms_norm(x, weight, 1e-5), _rms_norm.__wrapped__(x, weight, 1e-5))


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("intermediate", [4, 48, 100, 1500])  # 1500: two column blocks of 1024, the last masked
@pytest.mark.parametrize("num_tokens", TOKENS)
def test_silu_and_mul_matches_eager(dtype, intermediate, num_tokens):
    gate_up = _randn(num_tokens, 2 * intermediate, dtype=dtype, seed=intermediate)
    _close(fused_ops.silu_and_mul(gate_up), silu_and_mul.__wrapped__(gate_up))


def test_strided_rows_and_more_dimensions_match_eager():
    """Rows that are views of a wider buffer (as split projections hand them over) and per-head 3-D input."""
    both = _randn(5, 2 * 96, dtype=torch.bfloat16, seed=11)
    x, residual = both[:, :96], both[:, 96:]
    weight = _randn(96, dtype=torch.bfloat16, seed=12)
    for got, want in zip(
        fused_ops.add_rms_norm(x, residual, weight, 1e-6), _add_rms_norm.__wrapped__(x, residual, weight, 1e-6)
    ):
        _close(got, want)
    heads = _randn(4, 3, 64, dtype=torch.float16, seed=13)
    _close(fused_ops.rms_norm(heads, weight[:64].half(), 1e-6), _rms_norm.__wrapped__(heads, weight[:64].half(), 1e-6))
    wide = _randn(6, 3 * 40, dtype=torch.bfloat16, seed=14)[:, :80]  # gate_up itself a strided view
    _close(fused_ops.silu_and_mul(wide), silu_and_mul.__wrapped__(wide))
    batched = _randn(2, 3, 80, dtype=torch.bfloat16, seed=15)
    _close(fused_ops.silu_and_mul(batched), silu_and_mul.__wrapped__(batched))


def test_float32_weight_promotes_the_output_as_eager_does():
    """A float32 weight on bf16 activations: eager's weight * h.to(bf16) is float32, so is the kernel's."""
    x = _randn(3, 64, dtype=torch.bfloat16, seed=21)
    weight = 1 + _randn(64, dtype=torch.float32, seed=22, scale=0.3)
    got, want = fused_ops.rms_norm(x, weight, 1e-6), _rms_norm.__wrapped__(x, weight, 1e-6)
    assert got.dtype == torch.float32
    _close(got, want)


def test_no_tokens_gives_empty_outputs():
    x = torch.empty(0, 32, dtype=torch.bfloat16)
    out, total = fused_ops.add_rms_norm(x, x.clone(), torch.ones(32, dtype=torch.bfloat16), 1e-6)
    assert out.shape == total.shape == (0, 32)
    assert fused_ops.silu_and_mul(torch.empty(0, 64)).shape == (0, 32)


def test_unsupported_inputs_are_refused_with_what_was_wrong():
    with pytest.raises(ValueError, match="even last dimension, got \\(2, 7\\)"):
        fused_ops.silu_and_mul(torch.ones(2, 7))
    with pytest.raises(ValueError, match="1-D weight as wide as the rows"):
        fused_ops.rms_norm(torch.ones(2, 8), torch.ones(4), 1e-6)
    with pytest.raises(ValueError, match="residual \\(2, 8\\) torch.float16"):
        fused_ops.add_rms_norm(torch.ones(2, 8), torch.ones(2, 8, dtype=torch.float16), torch.ones(8), 1e-6)
    assert not fused_ops.supports_rms_norm(torch.ones(2, 8, dtype=torch.int32), torch.ones(8), 1e-6)


def test_layers_run_the_kernels_where_fusion_says_so(monkeypatch):
    """The modules dispatch to the kernels for tensors fusion.use_kernel accepts (CUDA ones; here, with
    no GPU, every tensor through the interpreter), and to eager for what a kernel does not take."""
    calls = []
    for name in ("add_rms_norm", "rms_norm", "silu_and_mul"):
        real = getattr(fused_ops, name)
        monkeypatch.setattr(fused_ops, name, lambda *a, _real=real, _name=name: calls.append(_name) or _real(*a))
    monkeypatch.setattr(fusion, "use_kernel", lambda tensor: True)
    norm = RMSNorm(40).to(torch.bfloat16)
    x, residual = _randn(3, 40, dtype=torch.bfloat16, seed=31), _randn(3, 40, dtype=torch.bfloat16, seed=32)
    out, total = norm(x, residual)
    assert torch.equal(total, x + residual)
    _close(out, _add_rms_norm.__wrapped__(x, residual, norm.weight, norm.eps)[0])
    _close(norm(x)[0], _rms_norm.__wrapped__(x, norm.weight, norm.eps))
    _close(SiluAndMul()(torch.cat([x, residual], -1)), silu_and_mul.__wrapped__(torch.cat([x, residual], -1)))
    assert calls == ["add_rms_norm", "rms_norm", "silu_and_mul"]
    mixed = residual.float()  # a residual of another dtype: no kernel takes it, eager promotes
    for got, want in zip(norm(x, mixed), _add_rms_norm.__wrapped__(x, mixed, norm.weight, norm.eps)):
        assert torch.equal(got, want) and got.dtype == torch.float32
    assert calls == ["add_rms_norm", "rms_norm", "silu_and_mul"]


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize(("num_tokens", "top_k", "hidden"), [(1, 8, 256), (5, 2, 100), (3, 4, 8), (0, 2, 16)])
def test_add_rms_norm_rows_sums_each_tokens_rows_then_norms(dtype, num_tokens, top_k, hidden):
    """A mixture of experts' unsummed rows into the next norm: the sum of fused_moe.sum_over_k (float32 in
    k order, rounded once), then add_rms_norm as before."""
    from model_optimizer.runtime.kernels.fused_moe import sum_over_k

    rows = _randn(num_tokens * top_k, hidden, dtype=dtype, seed=hidden + top_k)
    residual = _randn(num_tokens, hidden, dtype=dtype, seed=hidden + 5)
    weight = (1 + _randn(hidden, dtype=torch.float32, seed=4, scale=0.3)).to(dtype)
    summed = rows.float().view(num_tokens, top_k, hidden).sum(1).to(dtype)  # torch rounds to nearest
    if top_k > 1 and num_tokens:
        torch.testing.assert_close(sum_over_k(rows, num_tokens, top_k), summed, rtol=2**-7, atol=1e-6)
    want_out, want_sum = _add_rms_norm.__wrapped__(summed, residual, weight, 1e-6)
    got_out, got_sum = fused_ops.add_rms_norm_rows(rows, top_k, residual, weight, 1e-6)
    assert got_sum.shape == got_out.shape == (num_tokens, hidden)
    if num_tokens:
        _close(got_sum, want_sum)  # the k-sum's order may differ from torch's by one rounding
        _close(got_out, want_out)
    with pytest.raises(ValueError, match="rows per residual row"):
        fused_ops.add_rms_norm_rows(rows, top_k, torch.zeros(num_tokens + 1, hidden, dtype=dtype), weight, 1e-6)


def test_rms_norm_takes_expert_rows_and_sums_them_without_residual():
    """RMSNorm receives a mixture of experts' rows (layers/expert_rows.py): with a residual in one kernel,
    without one (no layer does that today) after their sum."""
    from model_optimizer.runtime.layers.expert_rows import ExpertRows

    norm = RMSNorm(64).to(torch.bfloat16)
    rows = _randn(6, 64, dtype=torch.bfloat16, seed=9)
    residual = _randn(3, 64, dtype=torch.bfloat16, seed=10)
    summed = ExpertRows(rows, 2).total()
    assert summed.shape == (3, 64)
    want = fused_ops.add_rms_norm(summed, residual, norm.weight, 1e-6)
    for got, expected in zip(norm(ExpertRows(rows, 2), residual), want):
        _close(got, expected)
    _close(norm(ExpertRows(rows, 2))[0], _rms_norm.__wrapped__(summed, norm.weight, norm.eps))
