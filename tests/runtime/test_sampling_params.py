"""SamplingParams reject bad values with a message saying what is allowed."""

from __future__ import annotations

import pytest

from model_optimizer import EngineConfig, SamplingParams


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"n": 0}, "n must be"),
        ({"temperature": -1}, "temperature"),
        ({"top_p": 0}, "top_p"),
        ({"top_k": -5}, "top_k"),
        ({"min_p": 1.5}, "min_p"),
        ({"repetition_penalty": 0}, "repetition_penalty"),
        ({"presence_penalty": 3}, "presence_penalty"),
        ({"frequency_penalty": -3}, "frequency_penalty"),
        ({"max_tokens": 0}, "max_tokens"),
        ({"min_tokens": 5, "max_tokens": 2}, "min_tokens"),
        ({"stop": [""]}, "stop"),
        ({"stop_token_ids": [-1]}, "stop_token_ids"),
        ({"logprobs": 21}, "logprobs"),
        ({"extra_args": {1: "a"}}, "extra_args must be a dict with string keys"),
        ({"extra_args": ["a"]}, "extra_args must be a dict"),
        ({"spaces_between_special_tokens": "no"}, "spaces_between_special_tokens must be true or false"),
    ],
)
def test_invalid_values_raise_clear_errors(kwargs, message):
    with pytest.raises(ValueError, match=message):
        SamplingParams(**kwargs)


def test_defaults_and_normalisation():
    p = SamplingParams(stop="END", top_k=-1, temperature=0)
    assert p.stop == ["END"] and p.top_k == 0 and p.greedy


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"block_size": 0}, "block_size"),
        ({"dtype": "int3"}, "dtype"),
        ({"gpu_memory_utilization": 1.5}, "gpu_memory_utilization"),
    ],
)
def test_engine_config_validation(kwargs, message):
    with pytest.raises(ValueError, match=message):
        EngineConfig(**kwargs)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"temperature": "hot"}, "temperature must be a finite number >= 0, got 'hot'"),
        ({"top_p": None}, "top_p"),
        ({"n": True}, "n must be an integer"),
        ({"max_tokens": 2.5}, "max_tokens"),
        ({"stop": 5}, "stop must be"),
        ({"stop_token_ids": "12"}, "stop_token_ids must be"),
        ({"ignore_eos": "yes"}, "ignore_eos must be true or false"),
        ({"logprobs": True}, "logprobs"),
    ],
)
def test_wrong_types_raise_valueerror_not_typeerror(kwargs, message):
    with pytest.raises(ValueError) as info:
        SamplingParams(**kwargs)
    assert message in str(info.value)


def test_whole_numbers_are_accepted_for_float_fields():
    assert SamplingParams(temperature=0, top_p=1, repetition_penalty=2).greedy


def test_output_kind_defaults_to_cumulative_and_rejects_strings():
    from model_optimizer.runtime.sampling_params import RequestOutputKind

    assert SamplingParams().output_kind is RequestOutputKind.CUMULATIVE
    assert SamplingParams(output_kind=RequestOutputKind.DELTA).output_kind is RequestOutputKind.DELTA
    with pytest.raises(ValueError, match="output_kind must be a RequestOutputKind"):
        SamplingParams(output_kind="delta")  # type: ignore[arg-type]


def test_vllms_plugin_fields_travel_to_the_engine_core_unchanged():
    """extra_args rides in the message the frontend sends the core (msgspec), as vLLM's plugins expect."""
    from model_optimizer.runtime.engine import messages

    params = SamplingParams(extra_args={"plugin": {"k": [1, 2]}}, spaces_between_special_tokens=False)
    [decoded] = [messages.decode_command(messages.encode(messages.CoreRequest("r", [1, 2], params, 8)))]
    assert decoded.params.extra_args == {"plugin": {"k": [1, 2]}}
    assert decoded.params.spaces_between_special_tokens is False


def test_what_vllm_takes_for_optional_fields_and_numbers():
    """None for stop and stop_token_ids is no stops, seed -1 is no seed, and NumPy numbers are numbers."""
    import numpy as np

    params = SamplingParams(stop=None, stop_token_ids=None, seed=-1)
    assert params.stop == [] and params.stop_token_ids == [] and params.seed is None
    params = SamplingParams(seed=np.int64(3), max_tokens=np.int32(5), temperature=np.float32(0.5), top_k=np.int8(-1))
    assert (params.seed, params.max_tokens, params.temperature, params.top_k) == (3, 5, 0.5, 0)
    assert type(params.seed) is int and type(params.temperature) is float
    params = SamplingParams(stop_token_ids={np.int64(9), 2, 7}, allowed_token_ids=frozenset({5, 3}), stop={"b", "ab"})
    assert (params.stop_token_ids, params.allowed_token_ids, params.stop) == ([2, 7, 9], [3, 5], ["ab", "b"])
    assert all(type(t) is int for t in params.stop_token_ids)
    with pytest.raises(ValueError, match="stop_token_ids"):
        SamplingParams(stop_token_ids={-1, 4})


def test_fields_are_keyword_only():
    """vLLM's SamplingParams(2, 0.5) is n=2, presence_penalty=0.5: here a positional value is refused."""
    with pytest.raises(TypeError):
        SamplingParams(2, 0.5)  # type: ignore[misc]
