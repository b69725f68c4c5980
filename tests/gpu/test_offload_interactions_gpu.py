"""Weight offload and the host KV tier on a GPU, beyond tests/gpu/test_offload_gpu.py: fp8 and int8-w8a8
layers streamed in (processed in host memory, so their layout must be the one the GPU path reads); seeded
sampling, n > 1 and logprobs under graphs; a host slot the tier fills twice in one step (the batched copy
must keep the block saved last); an fp8 KV cache through the tier and swap; both offloads together with
chunked prefill; and a host that cannot page-lock the memory (an error naming the setting, CUDA usable
after it).

Run: `pytest -q tests/gpu/test_offload_interactions_gpu.py` (with tests/gpu/test_offload_gpu.py).
"""

from __future__ import annotations

import gc

import pytest
import torch

from model_optimizer import LLM, SamplingParams
from model_optimizer.runtime.runner.host_memory import PAGE, host_buffer, page_lock
from model_optimizer.runtime.runner.weight_offload import decoder_layers, layer_weights
from tests import tiny_checkpoints as tiny
from tests.runtime.runner.test_host_kv_cache_threads import wide_kv_checkpoint

GREEDY = SamplingParams(temperature=0, max_tokens=24, ignore_eos=True)
PROMPTS = [[5, 17, 300, 41, 9, 77], [900, 3, 3, 250, 12, 64, 8, 199, 4, 31, 600], [42], list(range(3, 140))]


@pytest.fixture(scope="module")
def six_layers(tmp_path_factory):
    config = tiny.tiny_config("qwen3", num_hidden_layers=6, head_dim=32, hidden_size=128, intermediate_size=256)
    return str(tiny.build_checkpoint(tmp_path_factory.mktemp("offload_mix_gpu") / "qwen3", config, seed=11))


@pytest.fixture(scope="module")
def wide_kv(tmp_path_factory):
    return str(wide_kv_checkpoint(tmp_path_factory.mktemp("wide_kv_gpu")))


def greedy(llm: LLM, prompts: list[list[int]] = PROMPTS) -> list[list[int]]:
    return [o.outputs[0].token_ids for o in llm.generate(prompts, GREEDY, use_tqdm=False)]


def four_layers_gib(llm: LLM) -> float:
    """A budget that offloads four of six layers (two per slot)."""
    layer = decoder_layers(llm.runner.model)[0]
    return 3.5 * sum(t.numel() * t.element_size() for _, _, t in layer_weights(layer)) / 2**30


def release(llm: LLM) -> None:
    llm.close()
    gc.collect()
    torch.cuda.empty_cache()


@pytest.mark.parametrize("quantization", ["fp8", "int8-w8a8"])
def test_offloaded_fp8_and_w8a8_layers_give_the_same_tokens_with_graphs(six_layers, quantization):
    if quantization == "fp8" and torch.cuda.get_device_capability() < (8, 9):
        pytest.skip("fp8 weights need sm_89 or later")
    kwargs = dict(dtype="bfloat16", num_kv_blocks=256, max_num_seqs=8, quantization=quantization)
    # each batch against the plain engine's at the same batch: the quantized launches may differ by row
    # count, so a batch of 5 copies need not give the one-row tokens (int8-w8a8 did not on an H100)
    batches = [PROMPTS, PROMPTS[:1] * 5]
    plain = LLM(six_layers, **kwargs)
    expected, budget = [greedy(plain, batch) for batch in batches], four_layers_gib(plain)
    release(plain)
    llm = LLM(six_layers, cpu_offload_gb=budget, **kwargs)
    assert llm.runner.model.weight_offload.layer_ids == [0, 2, 3, 5]
    assert [greedy(llm, batch) for batch in batches] == expected  # the second a bigger decode bucket, replayed
    release(llm)


def test_seeded_sampling_n_and_logprobs_are_unchanged_by_weight_offload(six_layers):
    params = [
        SamplingParams(temperature=0.9, seed=5, n=3, max_tokens=16, logprobs=3, ignore_eos=True),
        SamplingParams(temperature=0, max_tokens=16, logprobs=2, prompt_logprobs=2, ignore_eos=True),
        SamplingParams(temperature=1.0, seed=9, top_k=20, top_p=0.9, max_tokens=16, ignore_eos=True),
    ]
    prompts = PROMPTS[:3]

    def run(llm: LLM) -> tuple[list, list]:
        out = llm.generate(prompts, params, use_tqdm=False)
        tokens = [[c.token_ids for c in o.outputs] for o in out]
        values = [lp[t].logprob for o in out for c in o.outputs for t, lp in zip(c.token_ids, c.logprobs or [])]
        return tokens, values

    kwargs = dict(dtype="bfloat16", num_kv_blocks=256, max_num_seqs=8)
    plain = LLM(six_layers, **kwargs)
    (tokens, values), budget = run(plain), four_layers_gib(plain)
    release(plain)
    llm = LLM(six_layers, cpu_offload_gb=budget, **kwargs)
    got_tokens, got_values = run(llm)
    assert got_tokens == tokens
    assert torch.allclose(torch.tensor(got_values), torch.tensor(values), atol=1e-3)
    release(llm)


def test_a_host_slot_filled_twice_in_one_step_keeps_the_block_saved_last(wide_kv):
    """A prompt of three full blocks is pushed out of a 5-block pool by another in one allocation and saved
    A2, A1, A0 into a 2-slot tier (A0 reuses A2's slot in that step); a prompt sharing A's first two blocks
    then loads them: the tokens of recomputing them."""
    first = [(i * 37) % 900 + 5 for i in range(49)]
    other = [(i * 53) % 900 + 7 for i in range(70)]
    again = first[:32] + [11, 12, 13]
    kwargs = dict(dtype="bfloat16", block_size=16, num_kv_blocks=5, max_model_len=80, max_num_seqs=1)
    plain = LLM(wide_kv, **kwargs)
    expected = greedy(plain, [again])
    two_slots = 2 * plain.runner.bytes_per_block() / 2**30
    release(plain)
    llm = LLM(wide_kv, kv_offloading_size=two_slots, **kwargs)
    assert llm.runner.host_kv.num_blocks == 2 and llm.runner.host_kv.batched
    outputs = [llm.generate([p], GREEDY, use_tqdm=False)[0] for p in (first, other, again)]
    assert outputs[-1].num_cached_tokens == 32 and llm.engine.stats().host_kv_hits == 32
    assert outputs[-1].outputs[0].token_ids == expected[0]
    release(llm)


def test_an_fp8_kv_cache_goes_through_the_tier_and_swap(tiny_model):
    """fp8 blocks move as bytes: a prefix evicted to host memory and back, and swapped requests, give the
    tokens of the same fp8 cache without the tier."""
    if torch.cuda.get_device_capability() < (8, 9):
        pytest.skip("an fp8 KV cache needs sm_89 or later")
    model = str(tiny_model("qwen3"))
    prefix = [(i * 37) % 900 + 5 for i in range(24)]
    prompts = (prefix + [1, 2, 3], [(i * 53) % 900 + 7 for i in range(40)], prefix + [9, 8, 7, 6])
    kwargs = dict(dtype="bfloat16", kv_cache_dtype="fp8", block_size=4, num_kv_blocks=16, max_model_len=64)
    runs = []
    for size in (0, 1e-3):
        llm = LLM(model, kv_offloading_size=size, max_num_seqs=1, **kwargs)
        runs.append([greedy(llm, [p])[0] for p in prompts])
        hits = llm.engine.stats().host_kv_hits
        release(llm)
    assert runs[0] == runs[1] and hits > 0
    squeeze = [[(i * 31 + j * 7) % 900 + 5 for j in range(14 + 5 * i)] for i in range(6)]
    roomy = LLM(model, max_num_seqs=6, **{**kwargs, "num_kv_blocks": 256})
    expected = greedy(roomy, squeeze)
    release(roomy)
    llm = LLM(model, max_num_seqs=6, preemption_mode="swap", kv_offloading_size=1e-3, **kwargs)
    assert greedy(llm, squeeze) == expected
    stats = llm.engine.stats()
    assert stats.num_swapped_in_blocks == stats.num_swapped_out_blocks > 0
    release(llm)


def test_both_offloads_with_swap_and_chunked_prefill_give_the_plain_tokens(six_layers):
    squeeze = [[(i * 31 + j * 7) % 900 + 5 for j in range(14 + 5 * i)] for i in range(6)]
    kwargs = dict(dtype="bfloat16", block_size=4, max_model_len=64, max_num_seqs=6)
    plain = LLM(six_layers, num_kv_blocks=256, **kwargs)
    expected, budget = greedy(plain, squeeze), four_layers_gib(plain)
    release(plain)
    llm = LLM(
        six_layers,
        num_kv_blocks=24,
        max_num_batched_tokens=16,
        cpu_offload_gb=budget,
        kv_offloading_size=1e-3,
        preemption_mode="swap",
        **kwargs,
    )
    assert greedy(llm, squeeze) == expected
    stats = llm.engine.stats()
    assert stats.num_preemptions > 0 and stats.num_swapped_in_blocks > 0
    release(llm)


class _Owner:
    """Something to tie a page lock's lifetime to."""


def test_a_failed_page_lock_names_the_setting_and_cuda_still_runs():
    buffer, owner = host_buffer(4 * PAGE), _Owner()
    page_lock(owner, buffer, "kv_offloading_size")
    with pytest.raises(ValueError, match="kv_offloading_size: cudaHostRegister .* lower kv_offloading_size"):
        page_lock(_Owner(), buffer, "kv_offloading_size")  # registered twice: CUDA refuses
    x = torch.arange(4.0, device="cuda") * 2  # the refusal is not left behind for the next launch
    torch.cuda.synchronize()
    assert x.sum().item() == 12.0
