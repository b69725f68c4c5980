"""Logprobs are reduced on the device in `Sampler.sample` and read on the host from copies.

Before, `Sampler.results` indexed the (rows, vocab) log-softmax after the ids arrived, one
`.item()` per request while the next step was already queued. Now the sampled token's logprob,
its rank and the top-k travel with the ids; these tests pin the values to a per-row reference
(what the old code computed) and prove that building the Logprob objects reads only host copies."""

from __future__ import annotations

import torch

from model_optimizer.runtime.engine.request import NONFINITE_TOKEN
from model_optimizer.runtime.layers.sampler import SampledLogprobs, Sampler, SamplingInput, reduce_logprobs
from model_optimizer.runtime.sampling_params import SamplingParams


def reference_logprob(logits_row: torch.Tensor, token_id: int, k: int) -> tuple[float, int, dict[int, float]]:
    """One row the simple way: log-softmax, the chosen entry, its rank, the row's own top-k."""
    row = torch.log_softmax(logits_row.float(), dim=-1)
    chosen = row[token_id].item()
    rank = int((row > chosen).sum().item()) + 1
    values, ids = row.topk(k) if k else (torch.empty(0), torch.empty(0, dtype=torch.int64))
    return chosen, rank, dict(zip(ids.tolist(), values.tolist()))


def test_device_reduction_matches_the_per_row_reference_for_mixed_k():
    torch.manual_seed(0)
    logits = torch.randn(6, 300) * 3
    ks = [0, 1, 5, None, 20, 3]
    batch = [
        SamplingInput(SamplingParams(temperature=0.9 if i % 2 else 0, logprobs=k, seed=i), [1, 2], [])
        for i, k in enumerate(ks)
    ]
    sampler = Sampler(torch.device("cpu"), seed=1)
    sampled = sampler.sample(logits.clone(), batch)
    assert sampled.logprobs is not None and sampled.logprobs.top_ids.shape == (6, 20)  # the largest k asked
    results = Sampler.results(sampled.checked_ids().tolist(), sampled.logprobs, batch)
    for i, ((token_id, logprob), k) in enumerate(zip(results, ks)):
        if k is None:
            assert logprob is None
            continue
        chosen, rank, top = reference_logprob(logits[i], token_id, k)
        assert (logprob.token_id, logprob.logprob, logprob.rank) == (token_id, chosen, rank)
        assert logprob.top == top and list(logprob.top) == list(top)  # same entries, largest first
    assert any(lp.rank > 1 for _, lp in results if lp is not None)  # sampled rows: not always the top token


def test_no_request_with_logprobs_means_no_reduction_and_no_vocab_sized_tensor_kept():
    sampler = Sampler(torch.device("cpu"))
    batch = [SamplingInput(SamplingParams(temperature=0), [1], [])]
    sampled = sampler.sample(torch.randn(1, 50), batch)
    assert sampled.logprobs is None
    sampled = sampler.sample(torch.randn(1, 50), [SamplingInput(SamplingParams(temperature=0, logprobs=2), [1], [])])
    assert all(t.shape[-1] != 50 for t in sampled.logprobs.tensors())  # the (rows, vocab) array is not held


def test_results_read_only_the_host_copies_never_the_device_tensors():
    """Device tensors on the meta device cannot be read at all: results must use `host`."""
    meta = SampledLogprobs(
        chosen=torch.empty(2, device="meta"),
        rank=torch.empty(2, dtype=torch.int64, device="meta"),
        top_values=torch.empty(2, 2, device="meta"),
        top_ids=torch.empty(2, 2, dtype=torch.int64, device="meta"),
    )
    meta.host = (
        torch.tensor([-0.5, -1.25]),
        torch.tensor([1, 3]),
        torch.tensor([[-0.5, -2.0], [-0.25, -0.75]]),
        torch.tensor([[7, 8], [4, 5]]),
    )
    batch = [
        SamplingInput(SamplingParams(temperature=0, logprobs=2), [1], []),
        SamplingInput(SamplingParams(temperature=0, logprobs=1), [1], []),
    ]
    results = Sampler.results([7, 9], meta, batch)
    first, second = (lp for _, lp in results)
    assert (first.logprob, first.rank, first.top) == (-0.5, 1, {7: -0.5, 8: -2.0})
    assert (second.token_id, second.logprob, second.rank, second.top) == (9, -1.25, 3, {4: -0.25})
    results = Sampler.results([NONFINITE_TOKEN, 9], meta, batch)
    assert results[0] == (NONFINITE_TOKEN, None)  # a failed row reports no logprob


def test_reduce_logprobs_ranks_ties_together_and_takes_k_zero():
    raw = torch.log_softmax(torch.tensor([[1.0, 2.0, 2.0, 0.0]]), dim=-1)
    reduced = reduce_logprobs(raw, torch.tensor([2]), 0)
    assert reduced.rank.tolist() == [1] and reduced.top_ids.shape == (1, 0)
    reduced = reduce_logprobs(raw, torch.tensor([0]), 2)
    assert reduced.rank.tolist() == [3] and set(reduced.top_ids[0].tolist()) == {1, 2}
