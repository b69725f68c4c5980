"""The sharded model on two GPUs over NCCL gives the logits of one GPU (skips unless two are visible)."""

from __future__ import annotations

import pytest
import torch

from tests.runtime.sharded import PROMPTS, prefill_logits
from tests.runtime.spawn import run_ranks

pytestmark = pytest.mark.skipif(torch.cuda.device_count() < 2, reason="needs two CUDA GPUs")


def _logits(size: int, model_dir: str, dtype: str) -> list[torch.Tensor]:
    """prefill_logits on `size` GPUs, one NCCL rank each (tp=1 too runs in a child: same code path)."""
    return run_ranks(prefill_logits, size, model_dir, None, PROMPTS, "cuda", dtype, device="cuda")


@pytest.mark.parametrize("name", ["llama3", "qwen2", "qwen3"])
def test_two_gpus_give_the_logits_of_one(tiny_model, name):
    """float32: the Triton attention and NCCL sums differ from one GPU by rounding only."""
    model_dir = str(tiny_model(name))
    (single,) = _logits(1, model_dir, "float32")
    rank0, rank1 = _logits(2, model_dir, "float32")
    torch.testing.assert_close(rank0, single, atol=1e-4, rtol=1e-4)
    assert torch.equal(rank0.argmax(-1), single.argmax(-1))
    assert torch.equal(rank0, rank1)


def test_bf16_on_two_gpus_stays_close(tiny_model):
    model_dir = str(tiny_model("qwen3"))
    (single,) = _logits(1, model_dir, "bfloat16")
    rank0, _ = _logits(2, model_dir, "bfloat16")
    torch.testing.assert_close(rank0, single, atol=0.1, rtol=0.05)
