"""Weight offload (cpu_offload_gb) and the host KV tier (kv_offloading_size, swap preemption) against the rest
of the engine, on the CPU with real tiny checkpoints: what a vLLM user expects is output identical to the
plain engine's, whatever else runs. Seeded sampling with n > 1, logprobs and prompt logprobs, embeddings
of the same decoder; prefix hits from host memory under chunked prefill and preemption; aborts and
prefix-cache resets between steps while blocks sit in host memory (every block and host slot comes back);
and both offloads under tensor parallelism (gloo worker processes)."""

from __future__ import annotations

import random

import pytest
import torch

from model_optimizer import LLM, SamplingParams
from model_optimizer.runtime.runner.weight_offload import decoder_layers, layer_weights
from tests import tiny_checkpoints as tiny

SMALL_POOL = dict(dtype="float32", block_size=4, max_model_len=64)


@pytest.fixture(scope="module")
def five_layers(tmp_path_factory):
    config = tiny.tiny_config("qwen3", num_hidden_layers=5, head_dim=16, tie_word_embeddings=True)
    return str(tiny.build_checkpoint(tmp_path_factory.mktemp("offload_mix") / "qwen3", config, seed=7))


def shared_prefix_prompts(seed: int, count: int) -> list[list[int]]:
    """Prompts on four prefixes of 8 to 27 tokens (prefix hits), each with 1 to 8 tokens of its own."""
    rng, pick = random.Random(3), random.Random(seed)
    prefixes = [[rng.randrange(5, 900) for _ in range(rng.choice([8, 13, 20, 27]))] for _ in range(4)]
    return [pick.choice(prefixes) + [pick.randrange(5, 900) for _ in range(pick.randrange(1, 9))] for _ in range(count)]


def outputs(llm: LLM, prompts: list, params: list[SamplingParams]) -> list:
    """Every completion's tokens, logprobs (id -> value) and the prompt logprobs, as plain values."""

    def logprobs(entries) -> list:
        return [None if e is None else {k: v.logprob for k, v in e.items()} for e in entries or []]

    return [
        ([(c.token_ids, logprobs(c.logprobs)) for c in o.outputs], logprobs(o.prompt_logprobs))
        for o in llm.generate(prompts, params, use_tqdm=False)
    ]


def test_every_layer_offloaded_keeps_seeded_sampling_logprobs_and_embeddings(five_layers):
    """All five layers through the two slots: the same weights, bit for bit, so the same numbers."""
    prompts = shared_prefix_prompts(0, 4)
    params = [
        SamplingParams(temperature=0.9, seed=5, n=3, max_tokens=10, logprobs=3, prompt_logprobs=2),
        SamplingParams(temperature=0, max_tokens=10, logprobs=1),
        SamplingParams(temperature=1.0, seed=9, top_k=20, max_tokens=10),
        SamplingParams(temperature=0.7, seed=1, n=2, max_tokens=10, presence_penalty=0.5),
    ]
    texts = ["hello world", "Paged attention keeps the KV cache in blocks."]
    plain = LLM(five_layers, dtype="float32", kv_cache_memory=1 << 22)
    every_layer = sum(
        t.numel() * t.element_size() for layer in decoder_layers(plain.runner.model) for _, _, t in layer_weights(layer)
    )
    llm = LLM(five_layers, dtype="float32", kv_cache_memory=1 << 22, cpu_offload_gb=every_layer / 2**30)
    assert llm.runner.model.weight_offload.layer_ids == [0, 1, 2, 3, 4]
    assert outputs(llm, prompts, params) == outputs(plain, prompts, params)
    vectors = [torch.tensor([e.outputs.embedding for e in x.embed(texts)]) for x in (plain, llm)]
    assert torch.equal(vectors[0], vectors[1])


def test_host_hits_and_swaps_keep_seeded_n_best_tokens_under_chunked_prefill(tiny_model):
    """Batches of prefix-sharing prompts (greedy and seeded, n of 1 to 3) through a 20-block pool, a host
    tier and swap preemption, prompts cut into chunks of 6 tokens: the tokens of a roomy pool."""
    model = str(tiny_model("qwen3"))
    batches = [shared_prefix_prompts(seed, 5) for seed in range(6)]
    params = [
        SamplingParams(temperature=0 if i % 2 else 0.8, seed=i, n=1 + i % 3, max_tokens=10, ignore_eos=True)
        for i in range(5)
    ]

    def tokens(llm: LLM) -> list:
        return [[[c.token_ids for c in o.outputs] for o in llm.generate(b, params, use_tqdm=False)] for b in batches]

    expected = tokens(LLM(model, num_kv_blocks=512, max_num_seqs=4, **SMALL_POOL))
    tight = dict(num_kv_blocks=20, max_num_seqs=4, max_num_batched_tokens=6, kv_offloading_size=2e-3)
    llm = LLM(model, preemption_mode="swap", **tight, **SMALL_POOL)
    assert tokens(llm) == expected
    stats = llm.engine.stats()
    assert stats.host_kv_hits > 0 and stats.num_preemptions > 0 and stats.num_swapped_in_blocks > 0
    assert stats.num_free_blocks == stats.num_blocks


def test_aborts_and_resets_between_steps_while_blocks_sit_in_host_memory(tiny_model):
    """Requests added, aborted (some while swapped out) and the prefix cache reset at random between steps:
    each request that finishes has the tokens it has alone, and every GPU block and host slot comes back."""
    model = str(tiny_model("qwen3"))
    greedy = SamplingParams(temperature=0, max_tokens=12, ignore_eos=True)
    alone = LLM(model, num_kv_blocks=512, **SMALL_POOL)
    llm = LLM(model, num_kv_blocks=18, max_num_seqs=4, kv_offloading_size=2e-4, preemption_mode="swap", **SMALL_POOL)
    engine, rng = llm.engine, random.Random(0)
    prompts, finished, aborted = {}, {}, set()
    swapped_aborts = 0
    pool = shared_prefix_prompts(1, 40)
    for step in range(300):
        roll = rng.random()
        if roll < 0.25 and pool:
            request_id = f"r{step}"
            prompts[request_id] = pool.pop()
            engine.add_request(request_id, prompts[request_id], greedy)
        elif roll < 0.31 and (live := sorted(set(prompts) - set(finished) - aborted)):
            request_id = rng.choice(live)
            swapped_aborts += request_id in engine.kv_cache.host_tier.swapped
            engine.abort(request_id)
            aborted.add(request_id)
        elif roll < 0.34:
            engine.reset_prefix_cache()
        for output in engine.step():
            if output.finished and output.request_id not in aborted:
                finished[output.request_id] = output.outputs[0].token_ids
    while engine.has_unfinished_requests():
        for output in engine.step():
            if output.finished and output.request_id not in aborted:
                finished[output.request_id] = output.outputs[0].token_ids
    assert finished and aborted and swapped_aborts, swapped_aborts
    for request_id, token_ids in finished.items():
        assert token_ids == alone.generate([prompts[request_id]], greedy, use_tqdm=False)[0].outputs[0].token_ids
    stats, tier = engine.stats(), engine.kv_cache.host_tier
    assert stats.host_kv_hits > 0 and stats.num_swapped_out_blocks > 0
    assert stats.num_free_blocks == stats.num_blocks
    assert not tier.swapped and len(tier.free_slots) + len(tier.slots) == tier.num_slots


@pytest.mark.slow
def test_tensor_parallel_with_both_offloads_gives_the_single_process_tokens(tiny_model):
    """Two gloo ranks, each streaming its offloaded layer and keeping its share of every host block."""
    model = str(tiny_model("qwen3"))
    prompts = shared_prefix_prompts(2, 6)
    greedy = SamplingParams(temperature=0, max_tokens=12, ignore_eos=True)
    expected = [o.outputs[0].token_ids for o in LLM(model, num_kv_blocks=512, **SMALL_POOL).generate(prompts, greedy)]
    offloads = dict(cpu_offload_gb=1e-9, kv_offloading_size=2e-3, preemption_mode="swap")
    llm = LLM(model, tensor_parallel_size=2, num_kv_blocks=20, max_num_seqs=4, **offloads, **SMALL_POOL)
    try:
        assert [o.outputs[0].token_ids for o in llm.generate(prompts, greedy, use_tqdm=False)] == expected
        assert llm.engine.stats().num_swapped_in_blocks > 0
    finally:
        llm.close()
