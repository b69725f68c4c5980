"""The pure-Python parts: prompt lookup, the measured on/off policy, and `--speculative-config` checks."""

from __future__ import annotations

import random

import numpy as np
import pytest

from model_optimizer.runtime.config import EngineConfig
from model_optimizer.runtime.engine.request import Request
from model_optimizer.runtime.sampling_params import SamplingParams
from model_optimizer.runtime.spec_decode.config import MAX_SPECULATIVE_TOKENS, parse_speculative_config
from model_optimizer.runtime.spec_decode.ngram import NgramProposer, lookup
from model_optimizer.runtime.spec_decode.policy import (
    MIN_PROBE_INTERVAL,
    PROBE_ALLOWANCE,
    PROBE_SHARE,
    SpecPolicy,
    bucket_of,
)


def test_lookup_proposes_what_followed_the_latest_match_with_k_tokens():
    tokens = np.array([1, 2, 3, 4, 5, 9, 1, 2, 3, 7, 8, 6, 1, 2, 3])
    assert lookup(tokens, 2, 1, 3) == [7, 8]  # (1, 2, 3) at 6 is the latest with two tokens after it
    assert lookup(tokens, 4, 1, 3) == [7, 8, 6, 1]


def test_lookup_prefers_the_longest_suffix_and_falls_back_to_shorter_ones():
    tokens = np.array([5, 1, 2, 8, 8, 8, 3, 2, 9, 9, 9, 1, 2])
    assert lookup(tokens, 1, 1, 3) == [8]  # (1, 2) matches at 1; (2) alone would also match at 7
    assert lookup(tokens, 1, 3, 3) == []  # no (9, 1, 2) earlier
    assert lookup(np.array([4]), 3, 1, 2) == []


def _lookup_reference(tokens: np.ndarray, k: int, min_n: int, max_n: int) -> list[int]:
    """The rule spelled out: for n from max_n down, every earlier place the last n tokens occur (with a token
    after them); the first n with any wins, and of its places the latest with k tokens after, else the first."""
    length = len(tokens)
    suffix_of = tokens.tolist()
    for n in range(min(max_n, length - 1), min_n - 1, -1):
        ends = [s + n for s in range(length - n) if suffix_of[s : s + n] == suffix_of[length - n :]]
        if ends:
            full = [e for e in ends if length - e >= k]
            begin = full[-1] if full else ends[0]
            return suffix_of[begin : begin + k]
    return []


def test_lookup_equals_the_rule_on_random_histories():
    rng = random.Random(0)
    for _ in range(3000):
        tokens = np.array([rng.randrange(rng.choice([2, 3, 5, 20])) for _ in range(rng.randrange(1, 60))])
        k, low = rng.randrange(1, 6), rng.randrange(1, 4)
        high = rng.randrange(low, 6)
        assert lookup(tokens, k, low, high) == _lookup_reference(tokens, k, low, high)


def test_proposer_follows_a_growing_request():
    request = Request("r", [1, 2, 3, 1, 2], SamplingParams(), max_tokens=8)
    proposer = NgramProposer(k=3, min_n=1, max_n=2)
    assert proposer.propose(request) == [3, 1, 2]
    request.output_token_ids += [3, 7]
    assert proposer.propose(request) == []  # nothing ever followed ... 3, 7
    request.output_token_ids += [1, 2]
    assert proposer.propose(request, k=2) == [3, 7]


NGRAM = {"method": "ngram", "num_speculative_tokens": 4}


def _feed(
    policy: SpecPolicy, num_running: int, spec: tuple[float, float], plain: tuple[float, float], steps: int
) -> list[bool]:
    """Run `steps` decisions at `num_running` requests; each step is measured as the mode it ran costs:
    (seconds per step, tokens per request-step). Like the speculator, the first step after a switch
    (and the very first) is not measured."""
    decisions: list[bool] = []
    for _ in range(steps):
        speculate = policy.should_speculate(num_running)
        if decisions and decisions[-1] == speculate:
            seconds, tokens = spec if speculate else plain
            policy.record(num_running, speculate, seconds, round(tokens * num_running))
        decisions.append(speculate)
    return decisions


def test_policy_measures_plain_then_one_speculative_step_then_keeps_the_winner():
    policy = SpecPolicy(parse_speculative_config(NGRAM))
    steps = _feed(policy, 1, spec=(0.008, 4.4), plain=(0.005, 1.0), steps=2000)
    assert steps[:3] == [False, False, True]  # two plain (the first is not measured), then the probe...
    assert all(steps[3 : 3 + MIN_PROBE_INTERVAL - 1])  # ...which found the winner
    assert steps.count(False) <= 2 + 2 * 4  # then probes of the plain mode at doubling intervals
    assert policy.verdict(bucket_of(1)) is True


def test_policy_does_not_speculate_where_the_step_time_grows_more_than_the_tokens():
    policy = SpecPolicy(parse_speculative_config(NGRAM))
    steps = _feed(policy, 64, spec=(0.040, 4.4), plain=(0.008, 1.0), steps=10_000)  # r = 5 > g = 4.4
    assert steps[:4] == [False, False, True, True] and policy.verdict(bucket_of(64)) is False
    assert not any(steps[4 : 4 + MIN_PROBE_INTERVAL - 1])
    assert sum(steps) <= PROBE_SHARE * len(steps)


def test_a_loss_at_a_smaller_batch_rules_out_larger_ones_without_probing():
    policy = SpecPolicy(parse_speculative_config(NGRAM))
    _feed(policy, 1, spec=(0.008, 4.4), plain=(0.005, 1.0), steps=50)
    _feed(policy, 16, spec=(0.030, 4.4), plain=(0.006, 1.0), steps=50)  # r = 5: loses at 16
    probes = policy.num_probes
    large = _feed(policy, 64, spec=(0.001, 4.4), plain=(0.008, 1.0), steps=MIN_PROBE_INTERVAL - 1)
    assert not any(large) and policy.num_probes == probes  # inferred: no step at 64 speculates
    assert policy.verdict(bucket_of(64)) is False and policy.verdict(bucket_of(8)) is None
    assert policy.verdict(bucket_of(2)) is None  # a win at 1 says nothing of 2


def test_a_win_at_a_larger_batch_rules_in_smaller_ones():
    policy = SpecPolicy(parse_speculative_config(NGRAM))
    _feed(policy, 8, spec=(0.012, 4.4), plain=(0.006, 1.0), steps=20)  # r = 2 < g
    assert policy.verdict(bucket_of(8)) is True and policy.verdict(bucket_of(3)) is True
    assert _feed(policy, 3, spec=(0.5, 4.4), plain=(0.001, 1.0), steps=3) == [True] * 3  # no probe first


def test_a_change_of_acceptance_seen_at_low_load_re_decides_high_load_without_a_probe():
    policy = SpecPolicy(parse_speculative_config(NGRAM))
    _feed(policy, 64, spec=(0.024, 1.5), plain=(0.008, 1.0), steps=20)  # r = 3 > g = 1.5
    assert policy.verdict(bucket_of(64)) is False
    _feed(policy, 1, spec=(0.008, 4.4), plain=(0.005, 1.0), steps=40)  # acceptance rose: g -> 4.4
    probes = policy.num_probes
    assert _feed(policy, 64, spec=(0.024, 4.4), plain=(0.008, 1.0), steps=5) == [True] * 5
    assert policy.num_probes == probes


def test_a_near_tie_goes_to_the_plain_mode():
    policy = SpecPolicy(parse_speculative_config(NGRAM))
    steps = _feed(policy, 64, spec=(0.0099, 1.0), plain=(0.010, 1.0), steps=MIN_PROBE_INTERVAL)  # nothing accepted
    assert policy.verdict(bucket_of(64)) is False and sum(steps) == 2  # the probe alone


def test_policy_notices_when_the_other_mode_becomes_faster():
    policy = SpecPolicy(parse_speculative_config(NGRAM))
    _feed(policy, 2, spec=(0.008, 4.4), plain=(0.005, 1.0), steps=300)
    later = _feed(policy, 2, spec=(0.008, 1.0), plain=(0.005, 1.0), steps=600)  # acceptance dropped
    assert later.index(False) <= 10 and not any(later[-100:])


def test_nothing_is_probed_while_a_prompt_is_prefilled():
    policy = SpecPolicy(parse_speculative_config(NGRAM))
    _feed(policy, 4, spec=(0.008, 4.4), plain=(0.005, 1.0), steps=2)  # plain measured, a probe due
    assert not any(policy.should_speculate(4, prefilling=True) for _ in range(50))
    assert policy.should_speculate(4)


def test_probes_stay_within_their_share_of_the_steps():
    rng = random.Random(0)
    policy = SpecPolicy(parse_speculative_config(NGRAM))
    for _ in range(200):  # bursts at random batch sizes, with costs that change every burst
        size = rng.choice([1, 2, 3, 5, 9, 17, 33, 64])
        spec, plain = (rng.uniform(0.005, 0.05), rng.uniform(1, 5)), (rng.uniform(0.004, 0.01), 1.0)
        _feed(policy, size, spec, plain, steps=rng.randrange(1, 200))
        assert policy.num_probes <= PROBE_ALLOWANCE + PROBE_SHARE * policy.num_steps


def test_disable_by_batch_size_and_fixed_policy():
    config = parse_speculative_config(
        {"method": "ngram", "num_speculative_tokens": 2, "disable_by_batch_size": 8, "adaptive": False}
    )
    policy = SpecPolicy(config)
    assert policy.should_speculate(7) and not policy.should_speculate(8) and not policy.should_speculate(0)


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ('{"method": "ngram"', "not valid JSON"),
        ("[1, 2]", "must be a JSON object"),
        ({"method": "eagle", "num_speculative_tokens": 2}, "not supported"),
        ({"method": "magic", "num_speculative_tokens": 2}, "method must be one of"),
        ({"method": "ngram", "num_speculative_tokens": 0}, "num_speculative_tokens"),
        ({"method": "ngram", "num_speculative_tokens": MAX_SPECULATIVE_TOKENS + 1}, "num_speculative_tokens"),
        ({"method": "ngram", "num_speculative_tokens": True}, "num_speculative_tokens"),
        ({"method": "ngram", "num_speculative_tokens": 2, "prompt_lookup_min": 4, "prompt_lookup_max": 2}, "exceed"),
        ({"method": "ngram", "num_speculative_tokens": 2, "model": "x"}, "takes none"),
        ({"method": "draft_model", "num_speculative_tokens": 2}, "needs 'model'"),
        ({"model": "x", "num_speculative_tokens": 2, "prompt_lookup_max": 3}, "ngram setting"),
        ({"method": "ngram", "num_speculative_tokens": 2, "typo": 1}, "unknown key"),
        ({"method": "ngram", "num_speculative_tokens": 2, "disable_by_batch_size": 0}, "disable_by_batch_size"),
    ],
)
def test_bad_configs_are_refused_with_what_is_allowed(value, message):
    with pytest.raises(ValueError, match=message):
        EngineConfig(speculative_config=value)


def test_config_defaults_and_inference():
    ngram = EngineConfig(speculative_config='{"method": "ngram", "num_speculative_tokens": 3}').speculative
    assert (ngram.prompt_lookup_min, ngram.prompt_lookup_max, ngram.adaptive) == (1, 4, True)
    draft = EngineConfig(speculative_config={"model": "/m", "num_speculative_tokens": 2}).speculative
    assert draft.is_draft_model and draft.model == "/m"
    assert EngineConfig().speculative is None
    with pytest.raises(ValueError, match="tensor_parallel_size 1"):
        EngineConfig(speculative_config={"model": "/m", "num_speculative_tokens": 2}, tensor_parallel_size=2)
