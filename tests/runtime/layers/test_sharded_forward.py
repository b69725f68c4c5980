"""A model split over two gloo ranks computes the same logits as on one device (float32, CPU)."""

from __future__ import annotations

import pytest
import torch

from tests import tiny_checkpoints as tiny
from tests.runtime.sharded import prefill_logits
from tests.runtime.spawn import run_ranks

pytestmark = pytest.mark.slow  # every test spawns gloo ranks

# tiny_model names (tests/conftest.py): what each adds to the split
MODELS = {
    "llama3": "1 KV head for 4 query heads: both ranks hold the same KV head (replicated), untied head",
    "mistral": "GQA with 2 KV heads, one per rank, untied head",
    "qwen2": "q/k/v biases, 4 KV heads, tied embedding, vocabulary 1031 (padded to 1032)",
    "qwen3": "q/k norms, 2 KV heads, tied embedding",
}


def _assert_same(sharded: torch.Tensor, single: torch.Tensor) -> None:
    assert sharded.shape == single.shape
    torch.testing.assert_close(sharded, single, atol=1e-5, rtol=1e-5)
    assert torch.equal(sharded.argmax(-1), single.argmax(-1))


@pytest.mark.parametrize("name", list(MODELS))
def test_two_ranks_give_the_logits_of_one(tiny_model, name):
    model_dir = str(tiny_model(name))
    single = prefill_logits(model_dir)
    rank0, rank1 = run_ranks(prefill_logits, 2, model_dir)
    _assert_same(rank0, single)
    assert torch.equal(rank0, rank1)  # every rank ends with the whole row (all_gather)


@pytest.fixture(scope="module")
def llama_with_o_proj_bias(tmp_path_factory):
    """Llama with attention_bias: biases on q, k, v and on the row-parallel o_proj."""
    config = tiny.tiny_config("llama", attention_bias=True)
    return str(tiny.build_checkpoint(tmp_path_factory.mktemp("bias") / "llama", config, seed=5, with_tokenizer=False))


def test_row_parallel_bias_is_added_once(llama_with_o_proj_bias):
    single = prefill_logits(llama_with_o_proj_bias)
    rank0, _ = run_ranks(prefill_logits, 2, llama_with_o_proj_bias)
    _assert_same(rank0, single)


def test_four_ranks_share_one_kv_head(tiny_model):
    """llama3 has one KV head: at tp=4 all four ranks replicate it, each with one query head."""
    model_dir = str(tiny_model("llama3"))
    single = prefill_logits(model_dir)
    results = run_ranks(prefill_logits, 4, model_dir)
    _assert_same(results[0], single)
