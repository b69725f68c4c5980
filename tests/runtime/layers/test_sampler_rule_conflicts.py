"""What the sampler draws when a row's token rules leave no token at a step: never a token outside
allowed_token_ids (only that rule is kept), the grammar's mask always; without allowed_token_ids, the
logits before any rule."""

from __future__ import annotations

import torch

from model_optimizer.runtime.layers.sampler import Sampler, SamplingInput
from model_optimizer.runtime.layers.token_mask import TokenMask
from model_optimizer.runtime.sampling_params import SamplingParams

LOGITS = torch.log(torch.tensor([[0.5, 0.25, 0.15, 0.10]]))
"""Greedy picks 0; with 0 gone, 1."""
AFTER_2 = [[2, 0], [2, 1], [2, 2], [2, 3]]
"""Bad words that, once the output ends with 2, bar every token (a conflict only the run reveals)."""


def draw(params: SamplingParams, output: list[int], mask: TokenMask | None = None, times: int = 1) -> set[int]:
    sampler = Sampler(torch.device("cpu"), seed=0)
    return {sampler(LOGITS.clone(), [SamplingInput(params, [9], output)], mask)[0][0] for _ in range(times)}


def test_allowed_token_ids_hold_when_bad_words_bar_every_allowed_token_mid_output():
    greedy = SamplingParams(temperature=0, allowed_token_ids=[1, 3], bad_words_token_ids=[[2, 1], [2, 3]])
    assert draw(greedy, [2]) == {1}  # before the fix: 0, outside allowed_token_ids
    sampled = greedy.clone(temperature=1.0)
    assert draw(sampled, [2], times=200) == {1, 3}
    assert draw(greedy, [3]) == {1}  # no conflict after 3: the rules as usual


def test_the_fallback_keeps_only_allowed_token_ids_not_the_bias():
    params = SamplingParams(
        temperature=0, allowed_token_ids=[1, 3], bad_words_token_ids=[[2, 1], [2, 3]], logit_bias={3: 50.0}
    )
    assert draw(params, [3]) == {3}  # no conflict: the bias applies
    assert draw(params, [2]) == {1}  # conflict: allowed_token_ids alone over the model's logits


def test_without_allowed_token_ids_the_row_keeps_its_logits_before_any_rule():
    params = SamplingParams(temperature=0, bad_words_token_ids=AFTER_2, logit_bias={1: 10.0})
    assert draw(params, [3]) == {1}  # the bias applies
    assert draw(params, [2]) == {0}  # every token barred: the model's own choice


def test_the_fallback_stays_inside_the_grammar_and_allowed_token_ids_both():
    """The grammar allows 2 and 3; allowed_token_ids 1 and 2; a bad word bars 2: nothing is left, and the
    fallback (allowed_token_ids alone, over the masked logits) leaves 2, in both."""
    from tests.runtime.layers.test_sampler import _mask

    mask = _mask([[2, 3]], [0], vocab=4)
    params = SamplingParams(temperature=1.0, allowed_token_ids=[1, 2], bad_words_token_ids=[[2]])
    assert draw(params, [], mask, times=50) == {2}
    disjoint = SamplingParams(temperature=0, allowed_token_ids=[0, 1], bad_words_token_ids=[[0]])
    assert draw(disjoint, [], mask) == {2}  # nothing allowed is in the grammar: the grammar wins


def test_rows_without_a_conflict_in_the_same_batch_are_untouched():
    sampler = Sampler(torch.device("cpu"), seed=0)
    conflicted = SamplingParams(temperature=0, allowed_token_ids=[1, 3], bad_words_token_ids=[[2, 1], [2, 3]])
    banned = SamplingParams(temperature=0, bad_words_token_ids=[[0]])
    batch = [SamplingInput(conflicted, [9], [2]), SamplingInput(banned, [9], [2]), SamplingInput(conflicted, [9], [3])]
    tokens = [token for token, _ in sampler(LOGITS.repeat(3, 1), batch)]
    assert tokens == [1, 1, 1]
