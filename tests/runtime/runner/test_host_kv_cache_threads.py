"""The host KV tier on a multi-threaded CPU: one step may save two GPU blocks to the same host slot (the
tier is full and its least recently used slot was filled earlier in the same step); the slot must hold
the block saved last, which the tier registered under its hash, whatever torch's intra-op threads do.
Before the fix the CPU path copied every save in one `index_copy_`, whose duplicate destinations race
across threads, and a later prefix hit loaded another block's keys and values (silently wrong text)."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from model_optimizer import LLM, SamplingParams
from model_optimizer.runtime.runner.host_kv_cache import HostKVCache
from tests import tiny_checkpoints as tiny

THREADS = 4


@pytest.fixture
def threads():
    """torch's intra-op threads at THREADS for the test (a CPU server runs many), restored after."""
    before = torch.get_num_threads()
    torch.set_num_threads(THREADS)
    yield
    torch.set_num_threads(before)


def test_a_slot_saved_twice_in_one_step_holds_the_last_block(threads):
    caches = [torch.randn(2, 5, 16, 8, 128) for _ in range(2)]  # blocks of 16 tokens, 8 KV heads of 128
    tier = HostKVCache(caches, 2, torch.device("cpu"))
    saves = [(2, 0), (1, 1), (0, 0)]  # a full 2-slot tier: block 0 reuses the slot block 2 took this step
    for _ in range(20):  # a race: the old copy lost it most times, not every time
        for host in tier.host:
            host.zero_()
        tier.apply(saves, [])
        for cache, host in zip(tier.kv_caches, tier.host):  # both as raw bits
            assert torch.equal(host[:, 0], cache[:, 0]) and torch.equal(host[:, 1], cache[:, 1])


def wide_kv_checkpoint(folder: Path) -> Path:
    """Two layers of 8 KV heads of 128: blocks of 16 tokens as large as a real model's, large enough for torch
    to copy one on several threads."""
    config = tiny.tiny_config(
        "qwen3",
        num_hidden_layers=2,
        hidden_size=64,
        intermediate_size=128,
        num_attention_heads=8,
        num_key_value_heads=8,
        head_dim=128,
    )
    return tiny.build_checkpoint(folder / "qwen3", config, seed=5)


@pytest.fixture(scope="module")
def wide_kv(tmp_path_factory):
    return wide_kv_checkpoint(tmp_path_factory.mktemp("wide_kv"))


def test_a_prefix_loaded_from_a_slot_reused_in_one_step_gives_the_recomputed_tokens(wide_kv, threads):
    """A (3 full blocks) is pushed out of a 5-block pool by B in one allocation: its blocks are saved in
    eviction order A2, A1, A0 into a 2-slot tier, so A0 reuses A2's slot in the same step. A prompt
    sharing A's first two blocks then loads them from host memory."""
    greedy = SamplingParams(temperature=0, max_tokens=6, ignore_eos=True)
    first = [(i * 37) % 900 + 5 for i in range(49)]
    other = [(i * 53) % 900 + 7 for i in range(70)]
    again = first[:32] + [11, 12, 13]
    kwargs = dict(dtype="float32", block_size=16, num_kv_blocks=5, max_model_len=80, max_num_seqs=1)
    plain = LLM(str(wide_kv), **kwargs)
    expected = plain.generate([again], greedy, use_tqdm=False)[0].outputs[0].token_ids
    two_slots = 2 * plain.runner.bytes_per_block() / 2**30
    for _ in range(3):
        llm = LLM(str(wide_kv), kv_offloading_size=two_slots, **kwargs)
        torch.set_num_threads(THREADS)  # the engine sets its own at start-up
        assert llm.runner.host_kv.num_blocks == 2
        outputs = [llm.generate([p], greedy, use_tqdm=False)[0] for p in (first, other, again)]
        assert outputs[-1].num_cached_tokens == 32 and llm.engine.stats().host_kv_hits == 32
        assert outputs[-1].outputs[0].token_ids == expected
