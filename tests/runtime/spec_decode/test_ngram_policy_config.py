"""The pure-Python parts: prompt lookup, the measured on/off policy, and `--speculative-config` checks."""

from __future__ import annotations

import numpy as np
import pytest

from model_optimizer.runtime.config import EngineConfig
from model_optimizer.runtime.engine.request import Request
from model_optimizer.runtime.sampling_params import SamplingParams
from model_optimizer.runtime.spec_decode.config import MAX_SPECULATIVE_TOKENS, parse_speculative_config
from model_optimizer.runtime.spec_decode.ngram import NgramProposer, lookup
from model_optimizer.runtime.spec_decode.policy import MAX_PROBE_INTERVAL, PROBE_STEPS, WARMUP_STEPS, SpecPolicy


def test_lookup_proposes_what_followed_the_latest_match_with_k_tokens():
    tokens = np.array([1, 2, 3, 4, 5, 9, 1, 2, 3, 7, 8, 6, 1, 2, 3])
    assert lookup(tokens, 2, 1, 3) == [7, 8]  # (1, 2, 3) at 6 is the latest with two tokens after it
    assert lookup(tokens, 4, 1, 3) == [7, 8, 6, 1]


def test_lookup_prefers_the_longest_suffix_and_falls_back_to_shorter_ones():
    tokens = np.array([5, 1, 2, 8, 8, 8, 3, 2, 9, 9, 9, 1, 2])
    assert lookup(tokens, 1, 1, 3) == [8]  # (1, 2) matches at 1; (2) alone would also match at 7
    assert lookup(tokens, 1, 3, 3) == []  # no (9, 1, 2) earlier
    assert lookup(np.array([4]), 3, 1, 2) == []


def test_proposer_follows_a_growing_request():
    request = Request("r", [1, 2, 3, 1, 2], SamplingParams(), max_tokens=8)
    proposer = NgramProposer(k=3, min_n=1, max_n=2)
    assert proposer.propose(request) == [3, 1, 2]
    request.output_token_ids += [3, 7]
    assert proposer.propose(request) == []  # nothing ever followed ... 3, 7
    request.output_token_ids += [1, 2]
    assert proposer.propose(request, k=2) == [3, 7]


def _feed(policy: SpecPolicy, num_running: int, spec_rate: float, plain_rate: float, steps: int) -> list[bool]:
    """Run `steps` decisions; each step measured at the rate of the mode it ran (tokens per second)."""
    decisions = []
    for _ in range(steps):
        spec = policy.should_speculate(num_running)
        decisions.append(spec)
        policy.record(num_running, spec, 1.0, int(spec_rate if spec else plain_rate))
    return decisions


def test_policy_speculates_where_it_measures_faster_and_not_where_slower():
    policy = SpecPolicy(parse_speculative_config({"method": "ngram", "num_speculative_tokens": 4}))
    small = _feed(policy, 1, spec_rate=300, plain_rate=100, steps=200)
    large = _feed(policy, 64, spec_rate=900, plain_rate=1000, steps=4000)
    assert small[:WARMUP_STEPS] == [True] * WARMUP_STEPS and all(small[2 * WARMUP_STEPS :][:50])
    slow_steps = sum(large[2 * WARMUP_STEPS :])
    assert slow_steps <= PROBE_STEPS * 8  # probes at doubling intervals: a few dozen steps in 4000
    assert len(large) > MAX_PROBE_INTERVAL / 2  # long enough for the intervals to have grown


def test_policy_notices_when_the_other_mode_becomes_faster():
    policy = SpecPolicy(parse_speculative_config({"method": "ngram", "num_speculative_tokens": 4}))
    _feed(policy, 2, spec_rate=300, plain_rate=100, steps=300)
    later = _feed(policy, 2, spec_rate=50, plain_rate=100, steps=600)  # acceptance dropped
    assert not any(later[-100:])


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
