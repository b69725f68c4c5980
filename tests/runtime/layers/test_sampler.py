"""Sampler filters checked on exact small distributions."""

from __future__ import annotations

import pytest
import torch

from model_optimizer.runtime.layers.sampler import Sampler, SamplingInput, _filtered_probs, plain
from model_optimizer.runtime.sampling_params import SamplingParams

LOGITS = torch.log(torch.tensor([[0.5, 0.25, 0.15, 0.10], [0.4, 0.3, 0.2, 0.1]]))


def test_top_k_top_p_min_p_masks():
    probs = _filtered_probs(LOGITS.clone(), [SamplingParams(top_k=2), SamplingParams()])
    assert torch.allclose(probs[0], torch.tensor([2 / 3, 1 / 3, 0, 0]))
    assert torch.allclose(probs[1], torch.tensor([0.4, 0.3, 0.2, 0.1]))
    probs = _filtered_probs(LOGITS.clone(), [SamplingParams(top_p=0.7), SamplingParams(min_p=0.6)])
    assert torch.allclose(probs[0], torch.tensor([2 / 3, 1 / 3, 0, 0]))  # 0.5 + 0.25 reaches 0.7
    assert torch.allclose(probs[1], torch.tensor([0.4, 0.3, 0, 0]))  # below 0.6 * 0.4 dropped (unnormalised is fine)


def test_sampling_follows_the_distribution_and_penalties_apply():
    sampler = Sampler(torch.device("cpu"), seed=0)
    params = SamplingParams(temperature=1.0)
    counts = torch.zeros(4)
    for _ in range(2000):
        [(token, _)] = sampler(LOGITS[:1].clone(), [SamplingInput(params, [9], [])])
        counts[token] += 1
    assert torch.allclose(counts / 2000, torch.tensor([0.5, 0.25, 0.15, 0.10]), atol=0.04)
    greedy = SamplingParams(temperature=0, repetition_penalty=10.0)
    [(token, _)] = sampler(LOGITS[:1].clone(), [SamplingInput(greedy, [0], [])])
    assert token == 1  # token 0 was seen, its logit is pushed down
    presence = SamplingParams(temperature=0, presence_penalty=2.0)
    [(token, _)] = sampler(LOGITS[:1].clone(), [SamplingInput(presence, [], [0])])
    assert token == 1


def test_rows_with_nan_or_inf_logits_come_back_as_nonfinite_token():
    """The torch path flags each row on the device; the ids it keeps for the device stay in the
    vocabulary (the next step may read them) and only the checked ids carry the flag."""
    from model_optimizer.runtime.engine.request import NONFINITE_TOKEN

    sampler = Sampler(torch.device("cpu"), seed=0)
    logits = torch.randn(4, 50)
    logits[1] = float("nan")
    logits[2, 7] = float("inf")
    batch = [
        SamplingInput(SamplingParams(temperature=0, logprobs=2), [1], []),
        SamplingInput(SamplingParams(temperature=0.7, top_k=5, logprobs=2), [1], []),
        SamplingInput(SamplingParams(temperature=0, presence_penalty=1.0), [1], [3]),
        SamplingInput(SamplingParams(temperature=1.0, top_p=0.9), [1], []),
    ]
    sampled = sampler.sample(logits.clone(), batch)
    assert sampled.finite.tolist() == [True, False, False, True]
    assert ((sampled.token_ids >= 0) & (sampled.token_ids < 50)).all()
    results = sampler(logits.clone(), batch)
    assert [token for token, _ in results][1:3] == [NONFINITE_TOKEN, NONFINITE_TOKEN]
    assert results[0][0] == logits[0].argmax() and results[0][1] is not None
    assert results[1][1] is None  # no logprobs of a failed row


def _mask(allowed: list[list[int]], index: list[int], vocab: int):
    from model_optimizer.runtime.layers.token_mask import TokenMask

    words = (vocab + 31) // 32
    bits = torch.zeros(len(allowed), words * 32, dtype=torch.int64)
    for row, tokens in enumerate(allowed):
        bits[row, tokens] = 1
    packed = (bits.view(len(allowed), words, 32) << torch.arange(32)).sum(-1)
    packed = torch.where(packed >= 2**31, packed - 2**32, packed).to(torch.int32)
    return TokenMask(packed, torch.tensor(index, dtype=torch.int32))


def test_a_grammar_mask_restricts_every_sampling_path_and_logprobs_cover_allowed_tokens_only():
    """Masked rows take an allowed token whatever the settings (greedy, penalties, top-k/p, plain
    temperature); their logprobs are those of the model renormalised over the allowed tokens (as vLLM),
    so no forbidden token is listed among the top ones; an unmasked row is untouched."""
    logits = torch.log(torch.tensor([[0.5, 0.25, 0.15, 0.10]] * 4))
    mask = _mask([[2, 3], [1]], [0, -1, 1, 0], vocab=4)
    batch = [
        SamplingInput(SamplingParams(temperature=0, logprobs=3), [9], []),
        SamplingInput(SamplingParams(temperature=0, logprobs=3), [9], []),
        SamplingInput(SamplingParams(temperature=0.8, top_k=3, presence_penalty=0.5), [9], [1]),
        SamplingInput(SamplingParams(temperature=1.0, top_p=0.9), [9], []),
    ]
    for fused in (False, True):  # the torch path, and the Triton kernel under the interpreter
        sampler = Sampler(torch.device("cpu"), seed=0, fused=fused)
        for _ in range(20):
            if fused:
                plain = [SamplingInput(SamplingParams(temperature=t), [9], []) for t in (0, 0, 1.0, 1.0)]
                ids, finite = sampler._choose_fused(logits.clone(), plain, mask)
                assert finite.all()
            else:
                ids = sampler.sample(logits.clone(), batch, mask).checked_ids()
            assert ids[0] == 2 and ids[1] == 0 and ids[2] == 1 and ids[3] in (2, 3)
    [(first, lp0), (second, lp1), *_] = Sampler(torch.device("cpu"))(logits.clone(), batch, mask)
    assert abs(lp0.logprob - torch.log(torch.tensor(0.15 / 0.25))) < 1e-5
    assert set(lp0.top) == {2, 3} and lp0.rank == 1  # two allowed tokens, though three were asked for
    assert set(lp1.top) == {0, 1, 2} and abs(lp1.logprob - torch.log(torch.tensor(0.5))) < 1e-5


def test_logit_bias_moves_the_draw_not_the_logprobs():
    """OpenAI's logit_bias: added before sampling (a row of its own, the others untouched); the logprobs
    reported are the model's own distribution's, as vLLM reports them."""
    sampler = Sampler(torch.device("cpu"), seed=0)
    biased = SamplingParams(temperature=0, logit_bias={3: 100.0}, logprobs=1)
    plain = SamplingParams(temperature=0, logprobs=1)
    [(token, logprob), (other, _)] = sampler(
        LOGITS.clone(), [SamplingInput(biased, [9], []), SamplingInput(plain, [9], [])]
    )
    assert (token, other) == (3, 0)
    assert abs(logprob.logprob - torch.log(torch.tensor(0.10)).item()) < 1e-5
    banned = SamplingParams(temperature=1.0, logit_bias={0: -100.0, 1: -100.0})
    draws = {sampler(LOGITS[:1].clone(), [SamplingInput(banned, [9], [])])[0][0] for _ in range(200)}
    assert draws <= {2, 3} and len(draws) == 2


def test_allowed_tokens_and_bad_words():
    """vLLM's allowed_token_ids (nothing else can be drawn) and bad words (a sequence's last token is
    barred where the output ends with the rest of it; a one-token word everywhere)."""
    sampler = Sampler(torch.device("cpu"), seed=0)
    only = SamplingParams(temperature=1.0, allowed_token_ids=[1, 3])
    assert {sampler(LOGITS[:1].clone(), [SamplingInput(only, [9], [])])[0][0] for _ in range(100)} == {1, 3}
    bad = SamplingParams(temperature=0, bad_words_token_ids=[[2, 0], [1]])
    assert sampler(LOGITS[:1].clone(), [SamplingInput(bad, [9], [2])])[0][0] == 2  # after 2, 0 and 1 barred
    assert sampler(LOGITS[:1].clone(), [SamplingInput(bad, [9], [3])])[0][0] == 0  # 0 is fine after 3


@pytest.mark.parametrize(
    ("out", "start", "forced"),
    [
        ([1, 2], None, None),  # within the budget of 3
        ([1, 2, 3], None, 7),  # the budget spent: the end's first token
        ([1, 2, 3, 7], None, 8),  # then the rest of it
        ([1, 2, 3, 7, 8], None, None),  # ended
        ([1, 7, 8], None, None),  # ended by itself before the budget
        ([1, 2, 7], None, 8),  # the model began the end itself just as the budget ran out
        ([1, 2, 3, 4], None, 7),  # past the budget without the end (the grammar barred it a step): still forced
        ([1, 2, 3, 7, 4], None, 7),  # a begun end broken off: forced again from its start
        ([1, 2, 3, 4], [5], None),  # the output did not open a block: not thinking
        ([5, 1, 2, 3], [5], 7),  # counted after the start tag
    ],
)
def test_the_thinking_budget_forces_the_end_of_the_block(out, start, forced):
    from model_optimizer.runtime.layers.logits_rules import _thinking_end

    params = SamplingParams(thinking_token_budget=3, thinking_end_token_ids=[7, 8], thinking_start_token_ids=start)
    assert _thinking_end(out, params) == forced
    logits = torch.zeros(1, 10)
    [(token, _)] = Sampler(torch.device("cpu"))(logits, [SamplingInput(params.clone(temperature=1.0), [9], out)])
    assert forced is None or token == forced


def test_the_thinking_budget_forces_nothing_once_another_end_began_a_call():
    """Kimi-K2 may begin its tool section (another end of the block) while thinking: the budget's end would
    land inside the call's arguments."""
    from model_optimizer.runtime.layers.logits_rules import _thinking_end

    params = SamplingParams(thinking_token_budget=3, thinking_end_token_ids=[7], thinking_other_end_token_ids=[[5, 6]])
    assert _thinking_end([1, 2, 3, 4], params) == 7
    assert _thinking_end([1, 5, 6, 2, 3], params) is None
    assert _thinking_end([1, 5, 2, 3], params) == 7  # only the whole sequence ends it


def test_min_tokens_keeps_eos_and_stop_tokens_from_being_drawn():
    params = SamplingParams(temperature=0, min_tokens=2, min_tokens_barred=(0, 1))
    sampler = Sampler(torch.device("cpu"), seed=0)
    assert sampler(LOGITS[:1].clone(), [SamplingInput(params, [9], [5])])[0][0] == 2  # 0 and 1 barred
    assert sampler(LOGITS[:1].clone(), [SamplingInput(params, [9], [5, 6])])[0][0] == 0  # min_tokens reached
    # the bar holds only until min_tokens: from then on the token is plain again (the fused kernel's, the
    # decode graph's draw, speculation), while logit_bias adjusts every token
    assert not plain(SamplingInput(params, [9], [5])) and plain(SamplingInput(params, [9], [5, 6]))
    assert not plain(SamplingInput(params.clone(logit_bias={3: 1.0}), [9], [5, 6]))


def test_the_thinking_budget_wins_over_bad_words_and_bias():
    """A spent budget forces its end tag even where a bad word or a bias bars it: the rules cannot keep the
    model thinking past its budget."""
    params = SamplingParams(
        temperature=1.0,
        thinking_token_budget=2,
        thinking_end_token_ids=[7],
        bad_words_token_ids=[[7]],
        logit_bias={7: -100.0},
        allowed_token_ids=[1, 2],
    )
    [(token, _)] = Sampler(torch.device("cpu"))(torch.zeros(1, 10), [SamplingInput(params, [9], [1, 2])])
    assert token == 7
    [(token, _)] = Sampler(torch.device("cpu"))(torch.zeros(1, 10), [SamplingInput(params, [9], [1])])
    assert token in (1, 2)  # within the budget the rules hold


def test_token_rules_that_leave_nothing_the_grammar_allows_give_way_to_it():
    """allowed_token_ids or bad words that bar every token a grammar's mask allows cannot be followed: the
    row keeps its masked logits that step (sampling a barred row would draw a token the grammar refuses)."""
    sampler = Sampler(torch.device("cpu"), seed=0)
    mask = _mask([[2, 3]], [0], vocab=4)  # the grammar allows 2 and 3
    for params in (
        SamplingParams(temperature=0, allowed_token_ids=[0, 1]),
        SamplingParams(temperature=0, bad_words_token_ids=[[2], [3]]),
    ):
        [(token, _)] = sampler(LOGITS[:1].clone(), [SamplingInput(params, [9], [])], mask)
        assert token == 2
