"""The compiled element-wise ops on CUDA: one compile serves every token count, results as eager."""

import pytest
import torch

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")]


def test_fused_ops_compile_once_for_every_token_count():
    """Only the token dimension is dynamic: new batch sizes reuse the kernel (no recompile mid-serving),
    while hidden sizes stay constants of it."""
    from torch._dynamo.utils import counters

    from model_optimizer.layers.activation import silu_and_mul
    from model_optimizer.layers.norm import _add_rms_norm

    before = counters["stats"]["unique_graphs"]
    weight = torch.randn(96, device="cuda", dtype=torch.bfloat16)
    for n in (5, 17, 64, 1000, 4096):
        x = torch.randn(n, 2 * 96, device="cuda", dtype=torch.bfloat16)
        torch.testing.assert_close(silu_and_mul(x), silu_and_mul.__wrapped__(x))
        h, r = x[:, :96], x[:, 96:]
        for got, want in zip(_add_rms_norm(h, r, weight, 1e-6), _add_rms_norm.__wrapped__(h, r, weight, 1e-6)):
            torch.testing.assert_close(got, want, atol=2e-2, rtol=2e-2)
    assert counters["stats"]["unique_graphs"] - before <= 2  # one graph per function
