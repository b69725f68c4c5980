"""SamplingParams and the engine take what vLLM's SamplingParams takes: an out-of-vocabulary stop token id with
min_tokens, temperatures and repetition penalties without an upper bound, any finite logit_bias, NumPy values
and tuples inside lists and dicts, and truncate_prompt_tokens up to max_model_len."""

from __future__ import annotations

import math

import numpy as np
import pytest

from model_optimizer import SamplingParams
from model_optimizer.runtime.engine.input_processor import kept_tokens


def _max_model_len(llm) -> int:
    return llm.engine.inputs.limits.max_model_len


def _one(llm, prompt, params):
    [out] = llm.generate(prompt, params, use_tqdm=False)
    return out


# -------------------------------------------------------------- 1. OOV stop id with min_tokens
def test_out_of_vocabulary_stop_token_id_with_min_tokens_runs(qwen3_llm):
    vocab = qwen3_llm.engine.inputs.vocab_size
    params = SamplingParams(temperature=0, max_tokens=4, min_tokens=2, stop_token_ids=[vocab + 10])
    out = _one(qwen3_llm, "Hello", params)
    completion = out.outputs[0]
    assert len(completion.token_ids) >= 2
    assert all(0 <= t < vocab for t in completion.token_ids)
    assert completion.finish_reason in ("length", "stop")


def test_out_of_vocabulary_stop_id_does_not_change_the_in_vocabulary_bar(qwen3_llm):
    """min_tokens still bars the in-vocabulary stop id beside the OOV one: the same output as without it."""
    vocab = qwen3_llm.engine.inputs.vocab_size
    plain = _one(qwen3_llm, "Hello", SamplingParams(temperature=0, max_tokens=6, ignore_eos=True))
    first = plain.outputs[0].token_ids[0]
    barred = SamplingParams(temperature=0, max_tokens=6, min_tokens=3, stop_token_ids=[first, vocab + 1])
    out = _one(qwen3_llm, "Hello", barred).outputs[0]
    assert len(out.token_ids) >= 3 and first not in out.token_ids[:2]


# -------------------------------------------------------------- 2. no upper bound on temperature, penalty
@pytest.mark.parametrize("temperature", [150.0, 1e4])
def test_high_temperature_is_taken_and_samples(temperature):
    assert SamplingParams(temperature=temperature).temperature == temperature


@pytest.mark.parametrize("penalty", [11.0, 1e3])
def test_high_repetition_penalty_is_taken(penalty):
    assert SamplingParams(repetition_penalty=penalty).repetition_penalty == penalty


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"temperature": math.inf}, "temperature must be a finite number >= 0"),
        ({"temperature": math.nan}, "temperature must be a finite number >= 0"),
        ({"temperature": -0.5}, "temperature must be a finite number >= 0"),
        ({"temperature": "hot"}, "temperature must be a finite number >= 0, got 'hot'"),
        ({"repetition_penalty": math.inf}, "repetition_penalty must be a finite number > 0"),
        ({"repetition_penalty": 0}, "repetition_penalty must be a finite number > 0"),
        ({"repetition_penalty": math.nan}, "repetition_penalty must be a finite number > 0"),
        ({"logit_bias": {5: math.inf}}, "logit_bias must map token ids"),
        ({"logit_bias": {5: -math.inf}}, "logit_bias must map token ids"),
        ({"logit_bias": {5: math.nan}}, "logit_bias must map token ids"),
        ({"logit_bias": {5: True}}, "logit_bias must map token ids"),
    ],
)
def test_non_finite_values_are_still_refused(kwargs, message):
    with pytest.raises(ValueError, match=message):
        SamplingParams(**kwargs)


@pytest.mark.parametrize(
    "kwargs",
    [
        {"temperature": 150.0},  # the fused kernel's path
        {"temperature": 150.0, "top_p": 0.9, "min_p": 0.01},  # the torch path
        {"temperature": 150.0, "repetition_penalty": 50.0},
    ],
)
def test_engine_samples_at_a_high_temperature(qwen3_llm, kwargs):
    vocab = qwen3_llm.engine.inputs.vocab_size
    outs = qwen3_llm.generate(
        ["Hello", "The quick brown"],
        [SamplingParams(max_tokens=6, ignore_eos=True, seed=s, logprobs=1, **kwargs) for s in (1, 2)],
        use_tqdm=False,
    )
    for out in outs:
        completion = out.outputs[0]
        assert completion.finish_reason == "length" and len(completion.token_ids) == 6
        assert all(0 <= t < vocab for t in completion.token_ids)
        assert all(math.isfinite(step[t].logprob) for step, t in zip(completion.logprobs, completion.token_ids))
        assert math.isfinite(completion.cumulative_logprob)


def test_high_temperature_spreads_the_draws(qwen3_llm):
    """At temperature 150 the distribution is near uniform: many seeds draw many different first tokens."""
    outs = qwen3_llm.generate(
        ["Hello"] * 24,
        [SamplingParams(temperature=150.0, max_tokens=1, seed=s) for s in range(24)],
        use_tqdm=False,
    )
    assert len({o.outputs[0].token_ids[0] for o in outs}) > 12


# -------------------------------------------------------------- 3. any finite logit_bias
@pytest.mark.parametrize("bias", [500.0, 1e4, -1e30, 1e30])
def test_large_logit_bias_is_taken(bias):
    assert SamplingParams(logit_bias={5: bias}).logit_bias == {5: bias}


@pytest.mark.parametrize("temperature", [0.0, 1.0])
def test_logit_bias_500_forces_the_token(qwen3_llm, temperature):
    out = _one(
        qwen3_llm,
        "Hello",
        SamplingParams(temperature=temperature, seed=3, max_tokens=4, ignore_eos=True, logit_bias={77: 500.0}),
    )
    assert out.outputs[0].token_ids == [77] * 4


@pytest.mark.parametrize("bias", [-1e30, -1e300])
def test_huge_negative_logit_bias_bans_the_token(qwen3_llm, bias):
    plain = _one(qwen3_llm, "Hello", SamplingParams(temperature=0, max_tokens=1))
    first = plain.outputs[0].token_ids[0]
    out = _one(qwen3_llm, "Hello", SamplingParams(temperature=0, max_tokens=1, logit_bias={first: bias}))
    assert out.outputs[0].token_ids[0] != first


@pytest.mark.parametrize(
    "kwargs",
    [
        {"temperature": 1e-4, "logit_bias": {77: 1e38}},  # past float32 once divided by the temperature
        {"temperature": 1.0, "logit_bias": {77: 1e300}},  # past float32 itself
        {"temperature": 1e-5, "top_p": 0.5, "logit_bias": {77: 1e35, 5: -1e300}},
    ],
)
def test_huge_positive_logit_bias_forces_the_token(qwen3_llm, kwargs):
    """No overflow into NaN logits (which drew token 0): the biased token comes out every step."""
    out = _one(qwen3_llm, "Hello", SamplingParams(max_tokens=3, seed=1, ignore_eos=True, **kwargs))
    assert out.outputs[0].token_ids == [77] * 3


# -------------------------------------------------------------- 4. NumPy values and tuples inside lists and dicts
def test_numpy_values_inside_lists_and_dicts_are_taken():
    p = SamplingParams(
        stop_token_ids=np.array([7, 9]),
        allowed_token_ids=[np.int64(3), np.int32(4)],
        bad_words_token_ids=[np.array([1, 2]), (np.int64(5),)],
        logit_bias={np.int64(5): np.float32(2.5), np.uint16(6): np.int64(-3)},
        thinking_end_token_ids=(np.int64(8),),
        thinking_token_budget=np.int64(4),
        thinking_other_end_token_ids=((np.int64(1), 2),),
        ignore_eos=np.True_,
        detokenize=np.bool_(True),
        skip_special_tokens=np.False_,
        temperature=np.float32(0.5),
        seed=np.int64(3),
        max_tokens=np.int16(8),
    )
    assert p.stop_token_ids == [7, 9] and all(type(t) is int for t in p.stop_token_ids)
    assert p.allowed_token_ids == [3, 4] and all(type(t) is int for t in p.allowed_token_ids)
    assert p.bad_words_token_ids == [[1, 2], [5]]
    assert all(type(seq) is list and all(type(t) is int for t in seq) for seq in p.bad_words_token_ids)
    assert p.logit_bias == {5: 2.5, 6: -3}
    assert all(type(k) is int for k in p.logit_bias) and type(p.logit_bias[5]) is float
    assert p.thinking_end_token_ids == [8] and p.thinking_other_end_token_ids == [[1, 2]]
    assert p.ignore_eos is True and p.detokenize is True and p.skip_special_tokens is False
    assert type(p.temperature) is float and p.temperature == 0.5
    assert type(p.seed) is int and type(p.max_tokens) is int and type(p.thinking_token_budget) is int


def test_tuples_are_taken_as_lists():
    p = SamplingParams(
        stop=("a", "b"),
        stop_token_ids=(1, 2),
        allowed_token_ids=(3, 4),  # not (3,) alone: the bad word 3 would bar every allowed token (refused)
        bad_words_token_ids=((1, 2), (3,)),
        bad_words=("x",),
    )
    assert p.stop == ["a", "b"] and p.stop_token_ids == [1, 2] and p.allowed_token_ids == [3, 4]
    assert p.bad_words_token_ids == [[1, 2], [3]] and p.bad_words == ["x"]
    assert p.clone(seed=1).bad_words_token_ids == [[1, 2], [3]]


def test_numpy_bool_is_no_integer_and_bad_values_still_fail():
    with pytest.raises(ValueError, match="n must be"):
        SamplingParams(n=np.True_)
    with pytest.raises(ValueError, match="stop_token_ids"):
        SamplingParams(stop_token_ids=np.array([-1]))
    with pytest.raises(ValueError, match="logit_bias must map"):
        SamplingParams(logit_bias={np.int64(5): np.float64("nan")})
    with pytest.raises(ValueError, match="bad_words_token_ids"):
        SamplingParams(bad_words_token_ids=[np.array([], dtype=np.int64)])


def test_extra_args_and_engine_field_keep_their_types():
    args = {"k": (1, 2)}
    p = SamplingParams(extra_args=args)
    assert p.extra_args is args and p.extra_args["k"] == (1, 2)
    assert p.clone(min_tokens_barred=[np.int64(3)]).min_tokens_barred == (3,)


def test_engine_runs_with_numpy_settings(qwen3_llm):
    vocab = qwen3_llm.engine.inputs.vocab_size
    base = _one(qwen3_llm, "Hello", SamplingParams(temperature=0, max_tokens=4, ignore_eos=True))
    params = SamplingParams(
        temperature=np.float32(0),
        max_tokens=np.int64(4),
        ignore_eos=np.True_,
        stop_token_ids=np.array([vocab + 3]),
        min_tokens=np.int64(1),
        logit_bias={np.int64(77): np.float64(0.0)},
        allowed_token_ids=np.arange(vocab),
    )
    out = _one(qwen3_llm, "Hello", params)
    assert out.outputs[0].token_ids == base.outputs[0].token_ids


# -------------------------------------------------------------- 5. truncate_prompt_tokens up to max_model_len
def test_kept_tokens_takes_max_model_len():
    assert kept_tokens(64, 64) == 64
    assert kept_tokens(-1, 64) == 63
    assert kept_tokens(1, 64) == 1
    with pytest.raises(ValueError, match="truncate_prompt_tokens is 65; give -1 or 1 to 64"):
        kept_tokens(65, 64)


def test_truncate_prompt_tokens_of_max_model_len_keeps_a_short_prompt(qwen3_llm):
    limit = _max_model_len(qwen3_llm)
    prompt = [42, 71, 364, 81]
    base = _one(qwen3_llm, [prompt], SamplingParams(temperature=0, max_tokens=3, ignore_eos=True))
    out = _one(
        qwen3_llm, [prompt], SamplingParams(temperature=0, max_tokens=3, ignore_eos=True, truncate_prompt_tokens=limit)
    )
    assert out.prompt_token_ids == prompt
    assert out.outputs[0].token_ids == base.outputs[0].token_ids


def test_truncate_prompt_tokens_above_max_model_len_is_refused(qwen3_llm):
    limit = _max_model_len(qwen3_llm)
    with pytest.raises(ValueError, match=f"truncate_prompt_tokens is {limit + 1}"):
        qwen3_llm.generate([[42, 71]], SamplingParams(max_tokens=1, truncate_prompt_tokens=limit + 1), use_tqdm=False)
