"""The pure-Python parts: prompt lookup, the measured on/off policy, and `--speculative-config` checks."""

from __future__ import annotations

import numpy as np
import pytest

from model_optimizer.runtime.config import EngineConfig
from model_optimizer.runtime.engine.request import Request
from model_optimizer.runtime.sampling_params import SamplingParams
from model_optimizer.runtime.spec_decode.config import MAX_SPECULATIVE_TOKENS, parse_speculative_config
from model_optimizer.runtime.spec_decode.ngram import NgramProposer, lookup
from model_optimizer.runtime.spec_decode.policy import (
    FIRST_PROBE_BUDGET,
    MAX_PROBE_INTERVAL,
    MAX_PROBE_STEPS,
    MIN_PROBE_INTERVAL,
    MIN_SAMPLES,
    PROBE_BUDGET,
    WINDOW,
    SpecPolicy,
    StepSample,
    _Window,
    bucket_of,
)
from model_optimizer.runtime.spec_decode.speculator import Speculator


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


NGRAM = {"method": "ngram", "num_speculative_tokens": 4}
SWITCH_FACTOR = 2.5
"""The first step after a switch, as measured on the H200 at one request: 18.6 ms against a steady 7.3 ms."""


def _run(policy: SpecPolicy, num_running: int, cost, steps: int, prefilling=lambda i: False, switch=None) -> list[bool]:
    """`steps` decisions at `num_running` requests; each step recorded with cost(speculated) -> (seconds, tokens)
    when steady, and SWITCH_FACTOR x those seconds (or `switch` seconds) when the mode changed."""
    decisions, last = [], None
    for i in range(steps):
        spec = policy.should_speculate(num_running, prefilling(i))
        seconds, tokens = cost(spec)
        steady = spec == last and not prefilling(i)
        if not steady:
            seconds = switch if switch is not None and spec else SWITCH_FACTOR * seconds
        policy.record(StepSample(num_running, spec, seconds, tokens, steady))
        decisions.append(spec)
        last = spec
    return decisions


def ngram_one_request(spec: bool) -> tuple[float, int]:  # H200, Llama-3.1-8B, acceptance length 4
    return (7.3e-3, 4) if spec else (4.6e-3, 1)


def ngram_64_requests(spec: bool) -> tuple[float, int]:  # always-on n-gram at 64: 0.75x
    return (24.8e-3, 141) if spec else (5.6e-3, 64)


def useless_draft_64(spec: bool) -> tuple[float, int]:  # a draft that agrees with nothing
    return (12.7e-3, 64) if spec else (5.6e-3, 64)


def test_one_request_speculates_though_its_switch_steps_are_slow():
    policy = SpecPolicy(parse_speculative_config(NGRAM))
    decisions = _run(policy, 1, ngram_one_request, 1000)
    explored = 2 * (MIN_SAMPLES + 1)  # each mode: a switch step and MIN_SAMPLES steady ones
    assert all(decisions[explored:MIN_PROBE_INTERVAL])
    assert decisions.count(False) <= explored + 4 * (MIN_SAMPLES + 1)  # a few probes of the plain mode
    row = policy.summary()[1]
    assert row["verdict"] is True and row["spec_step_ms"] == pytest.approx(7.3)  # no switch step counted


def test_sixty_four_requests_stay_plain_and_probes_stay_within_budget():
    policy = SpecPolicy(parse_speculative_config(NGRAM))
    decisions = _run(policy, 64, ngram_64_requests, 5000)
    explored = 2 * (MIN_SAMPLES + 1)
    assert not any(decisions[explored : explored + MIN_PROBE_INTERVAL])  # the first probe waits
    seconds = tokens = 0.0
    last = None
    for spec in decisions[explored:]:
        s, t = ngram_64_requests(spec)
        seconds, tokens, last = seconds + (s if spec == last else SWITCH_FACTOR * s), tokens + t, spec
    plain_seconds = tokens / 64 * 5.6e-3
    assert plain_seconds / seconds >= 0.99  # probes cost at most ~1% after the verdict
    assert policy.summary()[64]["probe_interval"] > MIN_PROBE_INTERVAL


def test_a_costly_switch_spaces_probes_out():
    """A draft model catches up on every token it has not seen when speculation resumes (here 100 ms at 64
    requests): the probe interval grows until such probes cost PROBE_BUDGET of the time between them."""
    policy = SpecPolicy(parse_speculative_config({"model": "draft", "num_speculative_tokens": 4}))
    decisions = _run(policy, 64, useless_draft_64, 20000, switch=0.1)
    runs = [run for run in "".join("s" if d else "." for d in decisions).split(".") if run]
    assert len(runs) <= 5  # the exploration and at most four probes in 20000 steps
    assert {len(run) for run in runs} == {2}  # each: the catch-up and one steady step, 2.3x behind
    lost = len(runs) * (0.1 + 12.7e-3 - 2 * 5.6e-3)  # against the same tokens in plain steps
    assert lost <= 0.005 * 20000 * 5.6e-3
    assert policy.summary()[64]["probe_interval"] >= 0.1 / (PROBE_BUDGET * 5.6e-3)


def test_verdicts_carry_over_to_larger_and_smaller_batches_without_probing():
    policy = SpecPolicy(parse_speculative_config(NGRAM))
    _run(policy, 64, ngram_64_requests, 20)  # measured: plain
    assert not any(_run(policy, 200, ngram_64_requests, 50))  # larger: plain, not one speculative step
    _run(policy, 4, ngram_one_request, 20)  # measured: speculate
    assert all(_run(policy, 2, ngram_one_request, 50))  # smaller: speculate from the first step
    assert policy.summary()[2]["verdict"] is None and policy.summary()[2]["inferred"] is True


def test_prefill_steps_neither_explore_nor_count():
    policy = SpecPolicy(parse_speculative_config(NGRAM))
    assert not any(_run(policy, 1, ngram_one_request, 30, prefilling=lambda i: True))  # stays in its mode
    assert policy.summary()[1]["verdict"] is None and policy.summary()[1]["plain_step_ms"] == 0
    assert all(_run(policy, 1, ngram_one_request, 40)[2 * (MIN_SAMPLES + 1) :])


def test_prefill_steps_while_exploring_run_plain_even_after_a_speculative_step():
    """A run whose requests keep arriving (192 requests, 64 at a time) explores between prefills: a step
    with prompt tokens that follows a speculative one must not speculate too (on the H200 a draft model's
    64-row verify step cost 22.8 ms against 5.9 ms plain, and such steps taught the policy nothing)."""
    policy = SpecPolicy(parse_speculative_config(NGRAM))
    _run(policy, 64, ngram_64_requests, MIN_SAMPLES + 1)  # plain's steady steps, then the switch to explore
    assert policy.should_speculate(64) is True and policy.summary()[64]["verdict"] is None
    policy.record(StepSample(64, True, 0.02, 64, steady=False))
    assert policy.should_speculate(64, prefilling=True) is False


def test_one_request_speculates_once_ngram_proposals_appear():
    """The H200 run that turned n-gram speculation off at one request: a fresh text has no repeated
    n-gram, so the first speculative steps verify nothing (a synchronous step for one token) and lose;
    once the text repeats, each verifying step yields four. The first probe comes soon enough that a
    256-token answer is mostly speculated."""
    steps = [0]

    def cost(spec: bool) -> tuple[float, int]:
        steps[0] += 1
        return (7.3e-3, 1 if steps[0] < 24 else 4) if spec else (4.6e-3, 1)

    decisions = _run(SpecPolicy(parse_speculative_config(NGRAM)), 1, cost, 256)
    assert not all(decisions[:MIN_PROBE_INTERVAL])  # the early verdict: plain
    assert decisions.count(True) >= len(decisions) // 2  # then speculating, most of the answer
    assert decisions[-MIN_PROBE_INTERVAL:].count(False) <= MAX_PROBE_STEPS


def test_policy_notices_when_the_acceptance_falls_and_rises_again():
    policy = SpecPolicy(parse_speculative_config(NGRAM))
    _run(policy, 2, ngram_one_request, 100)
    fallen = _run(policy, 2, lambda spec: (7.3e-3, 1) if spec else (4.6e-3, 1), 400)  # nothing accepted now
    assert not any(fallen[WINDOW:MIN_PROBE_INTERVAL])  # off once its window holds the new steps
    interval = policy.summary()[2]["probe_interval"]  # grown past the minimum: its probes cost time
    assert MIN_PROBE_INTERVAL < interval < 2000
    risen = _run(policy, 2, ngram_one_request, 2500)  # accepted again: the next probe finds it
    assert risen[-400:].count(False) <= MAX_PROBE_STEPS  # speculating, but for one probe of the plain mode


def test_speculator_records_only_steady_steps():
    """Steps are timed end to end; a switch, a batch-size bucket change or prompt tokens make a step unsteady."""
    now = [0.0]
    speculator = Speculator(parse_speculative_config({**NGRAM, "adaptive": False}), clock=lambda: now[0])
    request = Request("r", [1, 2, 3], SamplingParams(), max_tokens=100)
    request.num_computed_tokens = 2  # decoding: its last token left to compute
    for seconds, prompt_tokens in [(0.05, 3), (0.02, 0), (0.007, 0), (0.007, 0), (0.009, 0)]:
        assert speculator.begin_step([request])
        now[0] += seconds
        speculator.end_step(4, prompt_tokens)
    row = speculator.policy.summary()[1]
    assert row["spec_step_ms"] == pytest.approx(7.0)  # the prompt step and the one after it left out
    assert row["spec_tokens_per_s"] == pytest.approx(4 / 0.007)


def _decoding(rid: str, tokens: list[int], max_tokens: int = 100) -> Request:
    request = Request(rid, tokens[:1], SamplingParams(), max_tokens=max_tokens)
    request.output_token_ids += tokens[1:]
    request.num_computed_tokens = len(tokens) - 1  # decoding: its last token left to compute
    return request


def test_ngram_proposals_are_filled_to_k_so_every_row_verifies_k():
    """A verifying step's rows all propose k tokens (short proposals filled with their last token, rows
    without a match with theirs, rows near max_tokens too): one shape per batch size, which the verify
    graphs run. A row that cannot verify k makes the step plain; a prefill row is left out."""
    bounds = {"prompt_lookup_min": 1, "prompt_lookup_max": 4}
    speculator = Speculator(parse_speculative_config({**NGRAM, **bounds, "adaptive": False}), max_model_len=9)
    matched = _decoding("a", [5, 6, 7, 5, 6])  # ... 5, 6 -> 7, 5, 6: three of four
    unmatched = _decoding("b", [1, 2, 3, 4])
    near_end = _decoding("c", [5, 6, 7, 5, 6], max_tokens=5)  # one token left: still k
    prefill = _decoding("p", [5, 6, 7, 5, 6])
    prefill.num_computed_tokens = 2
    assert speculator.propose([matched, unmatched, near_end, prefill]) == {
        "a": [7, 5, 6, 6],
        "b": [4, 4, 4, 4],
        "c": [7, 5, 6, 6],
    }
    assert speculator.propose([unmatched]) == {}  # nothing to verify: a plain step
    penalized = _decoding("d", [5, 6, 7, 5, 6])
    penalized.params = SamplingParams(repetition_penalty=1.2)
    assert penalized.params.needs_history and speculator.propose([matched, penalized]) == {}
    assert speculator.propose([matched, _decoding("e", [5, 6, 7, 5, 6, 7])]) == {}  # 6 + 4 > max_model_len 9


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
    assert (ngram.prompt_lookup_min, ngram.prompt_lookup_max, ngram.adaptive) == (5, 5, True)
    draft = EngineConfig(speculative_config={"model": "/m", "num_speculative_tokens": 2}).speculative
    assert draft.is_draft_model and draft.model == "/m"
    assert EngineConfig().speculative is None
    with pytest.raises(ValueError, match="tensor_parallel_size 1"):
        EngineConfig(speculative_config={"model": "/m", "num_speculative_tokens": 2}, tensor_parallel_size=2)


def eager_tail(spec: bool, running: int) -> tuple[float, int]:
    """The H200 64-request n-gram run before verify steps were kept graphed: a win at 64 (15.4 ms for ~4
    tokens per request against 6.0 ms plain), then 20-36 ms speculative steps at every smaller batch, whose
    requests (those still running) accept fewer."""
    if running > 32:
        return (15.4e-3, 4 * running) if spec else (6.0e-3, running)
    return (35e-3, 3 * running) if spec else (5.0e-3, running)


def test_a_win_at_64_is_not_carried_far_down_and_a_slow_tail_is_caught_at_once():
    policy = SpecPolicy(parse_speculative_config(NGRAM))
    assert sum(_run(policy, 64, lambda spec: eager_tail(spec, 64), 30)) > 20  # measured: speculate
    assert policy.summary()[64]["verdict"] is True
    assert policy.should_speculate(17) and not policy._inferred(5)  # 17-32 inferred, 9-16 not
    tail = _run(policy, 24, lambda spec: eager_tail(spec, 24), 40)  # inferred in: speculates, then caught
    assert all(tail[: MIN_SAMPLES + 1]) and not any(tail[MIN_SAMPLES + 1 :])
    assert policy.summary()[32]["verdict"] is False  # its steady steps against the plain step at 64
    small = _run(policy, 12, lambda spec: eager_tail(spec, 12), 40)  # explored: plain, then a switch
    assert small.count(True) == 2 and policy.summary()[16]["verdict"] is False  # 2.3x behind: one steady step


def test_a_tail_of_slow_speculative_steps_costs_at_most_three_percent():
    """Target (b) as the policy sees it: a 64-request run after its warm-up, draining to one request at the
    end, speculation winning at 64 and losing at every smaller batch (the H200 run before verify steps were
    kept graphed: 0.84x with the old inference); against the same tokens in plain steps."""
    policy = SpecPolicy(parse_speculative_config(NGRAM))
    _run(policy, 64, lambda spec: eager_tail(spec, 64), 20)  # the warm-up run: measured at 64
    seconds = plain = 0.0
    last = None
    for running in [64] * 25 + [n for n in range(63, 0, -1) for _ in range(2)]:
        spec = policy.should_speculate(running)
        cost, tokens = eager_tail(spec, running)
        steady = spec == last[0] and bucket_of(running) == bucket_of(last[1]) if last else False
        policy.record(StepSample(running, spec, cost, tokens, steady))
        seconds += cost
        plain_cost, plain_tokens = eager_tail(False, running)
        plain += plain_cost * tokens / plain_tokens  # the same tokens without speculating
        last = (spec, running)
    assert plain / seconds >= 0.97


def test_an_expensive_loser_is_not_re_measured_within_a_short_run():
    """A draft model losing at 64 whose first speculative step catches up on every prompt (100 ms): the
    exploration stops after one steady step, and the first probe waits until it costs FIRST_PROBE_BUDGET."""
    policy = SpecPolicy(parse_speculative_config({"model": "draft", "num_speculative_tokens": 4}))
    decisions = _run(policy, 64, useless_draft_64, 350, switch=0.1)
    assert decisions.count(True) == 2  # the catch-up step and one steady step, 2.3x behind
    assert policy.summary()[64]["probe_interval"] >= 0.1 / (FIRST_PROBE_BUDGET * 5.6e-3) > 300


def test_a_loser_that_could_not_win_at_any_acceptance_waits_the_longest():
    """40 ms verifying steps at 64 requests yield at most 5 x 64 tokens: 8000 tokens/s, below plain's 11428."""
    policy = SpecPolicy(parse_speculative_config({"model": "draft", "num_speculative_tokens": 4}))
    _run(policy, 64, lambda spec: (40e-3, 64) if spec else (5.6e-3, 64), 20)
    assert policy.summary()[64]["verdict"] is False and policy.summary()[64]["probe_interval"] == MAX_PROBE_INTERVAL


def test_the_long_draft_run_at_64_requests_costs_at_most_three_percent():
    """Target (b) as the policy saw the H200's long run (3 x 64 requests, 64 at a time, fresh policy): a useless
    1B draft, steady verify steps 20.3 ms against 5.85 ms plain, and a switch to speculating that catches the
    draft up on every row's context (~60 ms over the prompts, ~80 ms once each has ~100 tokens more), prompts
    in two 8192-token steps of ~0.15 s. It ran 6 verifying steps, the exploration's 2 and a 4-step probe ~200
    steps later, and reached 0.941x (this replay, with the policy of then: the same 6 steps, 0.943x)."""
    policy = SpecPolicy(parse_speculative_config({"model": "draft", "num_speculative_tokens": 4}))
    seconds = plain = 0.0
    verifying, last = 0, None
    for _ in range(3):  # waves of 64 requests
        steps = [(32, True), (64, True)] + [(64, False)] * 128  # two prefill steps, then 128 decode steps
        for i, (running, prefill) in enumerate(steps):
            spec = policy.should_speculate(running, prefill)
            steady = last == (spec, running, False) and not prefill
            if spec:
                cost = 20.3e-3 if steady else (0.06 if i < 20 else 0.08)
            else:
                cost = 0.15 if prefill else 5.85e-3 if steady else 6.5e-3  # after a switch: nothing overlapped
            policy.record(StepSample(running, spec, cost, 0 if prefill else running, steady))
            seconds += cost
            plain += 0.15 if prefill else 5.85e-3
            verifying += spec
            last = (spec, running, prefill)
    assert verifying == 2  # the catch-up and one steady step, 3.4x behind; the first probe comes later
    assert policy.summary()[64]["probe_interval"] > 3 * 130
    assert plain / seconds >= 0.97


def test_window_excess_is_what_the_other_mode_cost_beyond_this_rate():
    window = _Window()
    assert window.excess(0.5, 10) == 0.5  # no rate yet: every second counts
    for _ in range(3):
        window.add(0.01, 10, 1)  # 1,000 tokens/s
    assert window.excess(0.05, 20) == pytest.approx(0.03)  # 20 tokens would have taken 0.02 s
    assert window.excess(0.01, 20) == 0.0  # faster than this rate: nothing lost
