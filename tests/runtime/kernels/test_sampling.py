"""The fused Gumbel-max sampling kernel on the CPU (Triton interpreter): greedy rows, seeds, and the
distribution it draws from against softmax(logits / T)."""

from __future__ import annotations

import pytest
import torch

from model_optimizer.runtime.kernels.sampling import CHUNK, gumbel_sample, gumbel_sample_checked


def test_greedy_rows_take_the_argmax_with_lowest_index_ties():
    logits = torch.randn(3, CHUNK + 37)
    logits[1, 5] = logits[1, CHUNK + 3] = 50.0  # a tie across chunks goes to the lower index
    got = gumbel_sample(logits, torch.zeros(3), torch.arange(3, dtype=torch.int64))
    expected = logits.argmax(dim=1)
    assert got.tolist() == expected.tolist() and got[1] == 5


def test_same_seed_same_token_and_rows_are_independent():
    logits = torch.zeros(4, 300)  # uniform: the draw is the noise alone
    inv = torch.ones(4)
    a = gumbel_sample(logits, inv, torch.tensor([7, 7, 8, 9]))
    b = gumbel_sample(logits, inv, torch.tensor([7, 1, 8, 9]))
    assert a[0] == a[1] == b[0] and a[2] == b[2] and a[3] == b[3]
    many = gumbel_sample(torch.zeros(40, 300), torch.ones(40), torch.arange(40, dtype=torch.int64))
    assert len(set(many.tolist())) > 20


@pytest.mark.slow
def test_draws_follow_softmax_of_scaled_logits():
    """1,500 rows of one 6-token distribution at T = 0.7: frequencies within 4.5 standard errors."""
    base = torch.tensor([2.0, 1.0, 0.5, 0.0, -1.0, -30.0])
    rows = 1500
    temperature = 0.7
    got = gumbel_sample(
        base.repeat(rows, 1), torch.full((rows,), 1 / temperature), torch.arange(rows, dtype=torch.int64) * 7919
    )
    counts = torch.bincount(got, minlength=6).double()
    probs = torch.softmax(base.double() / temperature, dim=0)
    std = (rows * probs * (1 - probs)).sqrt()
    assert ((counts - rows * probs).abs() <= 4.5 * std + 1).all(), (counts, rows * probs)
    assert counts[5] == 0


def test_bf16_logits_are_read_in_place():
    logits = torch.randn(2, 1000).to(torch.bfloat16)
    got = gumbel_sample(logits, torch.zeros(2), torch.zeros(2, dtype=torch.int64))
    assert got.tolist() == logits.float().argmax(dim=1).tolist()


def test_sampler_fused_path_greedy_rows_and_batch_independent_seeds():
    """The Sampler's use of the kernel (it runs on CUDA only in the engine; here the interpreter runs it)."""
    from model_optimizer.runtime.layers.sampler import Sampler, SamplingInput
    from model_optimizer.runtime.sampling_params import SamplingParams

    sampler = Sampler(torch.device("cpu"), seed=0)
    logits = torch.randn(3, 500)
    greedy = SamplingInput(SamplingParams(temperature=0), [1], [])
    seeded = SamplingInput(SamplingParams(temperature=0.9, seed=42), [1], [], position=3)
    free = SamplingInput(SamplingParams(temperature=0.9), [1], [])
    together, finite = sampler._choose_fused(logits, [greedy, seeded, free])
    assert together[0] == logits[0].argmax() and finite.all()
    alone, _ = sampler._choose_fused(logits[1:2], [seeded])
    assert alone[0] == together[1]  # a seeded row draws the same noise in any batch
    later = [
        sampler._choose_fused(logits[1:2], [SamplingInput(seeded.params, [1], [], position=p)])[0][0]
        for p in range(4, 24)
    ]
    assert len(set(later)) > 5  # ... and fresh noise at every output position


def test_sampler_reuses_its_row_tensors_and_draws_no_noise_for_greedy_batches():
    """Per-row inputs stay on the device by value: the same batch composition copies nothing again; an
    all-greedy batch leaves the generator untouched; a new temperature gets its own tensor."""
    from model_optimizer.runtime.layers.sampler import Sampler, SamplingInput
    from model_optimizer.runtime.sampling_params import SamplingParams

    sampler = Sampler(torch.device("cpu"), seed=0)
    logits = torch.randn(2, 700)
    greedy = [SamplingInput(SamplingParams(temperature=0), [1], [])] * 2
    state = sampler.generator.get_state()
    ids, finite = sampler._choose_fused(logits, greedy)
    assert ids.tolist() == logits.argmax(dim=1).tolist() and finite.all()
    assert torch.equal(sampler.generator.get_state(), state)  # no random draw for greedy rows
    kept = dict(sampler._row_tensors)
    sampler._choose_fused(logits, greedy)
    assert sampler._row_tensors.keys() == kept.keys()
    assert all(sampler._row_tensors[k] is v for k, v in kept.items())  # reused, not copied again
    hot = [SamplingInput(SamplingParams(temperature=0.5), [1], []), greedy[0]]
    sampler._choose_fused(logits, hot)
    assert sampler._row_tensors[(torch.float32, (2.0, 0.0))].tolist() == [2.0, 0.0]
    assert not torch.equal(sampler.generator.get_state(), state)  # a sampled row draws its noise


def test_rows_with_nan_or_inf_logits_are_flagged_and_still_get_a_vocabulary_id():
    vocab = 2 * CHUNK + 50
    logits = torch.randn(6, vocab)
    logits[1, :] = float("nan")  # a whole row, as a NaN hidden state gives
    logits[2, CHUNK + 7] = float("nan")  # one entry in the second chunk
    logits[3, vocab - 1] = float("inf")  # in the last, partial chunk
    logits[4, 0] = float("-inf")
    inv = torch.tensor([0.0, 0.0, 1.0, 0.0, 1.0, 1.0])
    ids, finite = gumbel_sample_checked(logits, inv, torch.arange(6, dtype=torch.int64))
    assert finite.tolist() == [True, False, False, False, False, True]
    assert ((ids >= 0) & (ids < vocab)).all()  # the next step may read any of them
    assert ids[0] == logits[0].argmax()
    assert torch.equal(gumbel_sample(logits, inv, torch.arange(6, dtype=torch.int64)), ids)


def _bitmask(allowed: list[list[int]], vocab: int) -> torch.Tensor:
    """(rows, words) int32 with the bits of each row's allowed tokens set."""
    words = (vocab + 31) // 32
    bits = torch.zeros(len(allowed), words * 32, dtype=torch.int64)
    for row, tokens in enumerate(allowed):
        bits[row, tokens] = 1
    packed = (bits.view(len(allowed), words, 32) << torch.arange(32)).sum(-1)
    return torch.where(packed >= 2**31, packed - 2**32, packed).to(torch.int32)


def test_a_token_mask_restricts_constrained_rows_as_masked_logits_would():
    """Rows 0 and 2 constrained (tokens in the first, second and partial last chunk), row 1 free: the kernel
    reading the packed mask draws what it draws, same noise, from logits with the forbidden tokens pushed
    to -1e30 (finite, so the kernel's own NaN/inf check stays quiet on the reference), and greedy rows
    take the argmax of the masked logits."""
    from model_optimizer.runtime.layers.token_mask import TokenMask, allowed_tokens

    vocab = 2 * CHUNK + 70
    logits = torch.randn(3, vocab)
    logits[0, 3] = logits[2, 1] = 100.0  # the unmasked favourites, forbidden below
    bitmask = _bitmask([[5, CHUNK + 9, vocab - 1], [1, 2, 7, 2 * CHUNK + 3]], vocab)
    mask = TokenMask(bitmask, torch.tensor([0, -1, 1], dtype=torch.int32))
    masked = logits.masked_fill(~allowed_tokens(mask, vocab), -1e30)
    for inv in (torch.zeros(3), torch.full((3,), 1.3)):
        seeds = torch.tensor([11, 12, 13])
        got, finite = gumbel_sample_checked(logits, inv, seeds, mask.as_tuple())
        expected, _ = gumbel_sample_checked(masked, inv, seeds)
        assert got.tolist() == expected.tolist() and finite.all()  # a forbidden token is no non-finite logit
        assert got[0] in (5, CHUNK + 9, vocab - 1) and got[2] in (1, 2, 7, 2 * CHUNK + 3)
    greedy = gumbel_sample(logits, torch.zeros(3), seeds, mask.as_tuple())
    assert greedy.tolist() == masked.argmax(dim=1).tolist() and greedy[1] == logits[1].argmax()


def test_a_masked_row_with_a_nan_logit_is_still_flagged():
    vocab = CHUNK + 10
    logits = torch.randn(2, vocab)
    logits[0, 4] = float("nan")  # a token the mask forbids: the model's fault all the same
    bitmask = _bitmask([[1, 2]], vocab)
    _, finite = gumbel_sample_checked(
        logits, torch.ones(2), torch.tensor([1, 2]), (bitmask, torch.tensor([0, 0], dtype=torch.int32))
    )
    assert finite.tolist() == [False, True]


def test_the_last_chunk_of_a_row_finishes_it_as_the_torch_ops_did(monkeypatch):
    """The argmax over chunks runs in the kernel (the row's last program); inside a CUDA-graph capture without
    counters the torch ops do it. Both give the same ids and flags: ties across chunks to the lower id, a
    NaN chunk winning, a row whose every token a mask forbids (best -inf: flagged, as isfinite said)."""
    from model_optimizer.runtime.kernels import sampling

    vocab = 3 * CHUNK + 5
    gen = torch.Generator().manual_seed(3)
    logits = torch.randn(6, vocab, generator=gen)
    logits[0, 9] = logits[0, 2 * CHUNK + 1] = 40.0  # a tie across chunks
    logits[1, CHUNK + 2] = float("nan")
    logits[2, 3 * CHUNK + 1] = float("inf")
    inv = torch.tensor([0.0, 1.0, 0.0, 0.7, 0.0, 1.3])
    seeds = torch.arange(6, dtype=torch.int64) * 31
    words = -(-vocab // 32)
    bitmask = torch.zeros(1, words, dtype=torch.int32)  # forbids everything
    mask = (bitmask, torch.tensor([-1, -1, -1, -1, 0, -1], dtype=torch.int32))
    ids, ok = gumbel_sample_checked(logits, inv, seeds, mask)
    again = gumbel_sample_checked(logits, inv, seeds, mask)  # the counters were reset
    monkeypatch.setattr(sampling._counters, "get", lambda device, size: None)
    want_ids, want_ok = gumbel_sample_checked(logits, inv, seeds, mask)
    assert ids.dtype == torch.int64 and ok.dtype == torch.bool
    assert torch.equal(ids, want_ids) and torch.equal(ok, want_ok) and torch.equal(again[0], ids)
    assert ids[0] == 9 and ok.tolist() == [True, False, False, True, False, True]
