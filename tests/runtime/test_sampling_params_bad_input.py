"""SamplingParams and EngineConfig refuse bad values with a ValueError naming the field, on construction;
token ids a field gives are checked against the vocabulary (`check_vocab`) before the sampler sees them."""

from __future__ import annotations

import pytest

from model_optimizer.runtime.config import EngineConfig
from model_optimizer.runtime.sampling_params import SamplingParams


def test_an_empty_allowed_token_ids_is_refused_not_read_as_any_token():
    with pytest.raises(ValueError, match="allowed_token_ids is empty"):
        SamplingParams(allowed_token_ids=[])


@pytest.mark.parametrize("name", ["thinking_end_token_ids", "thinking_start_token_ids"])
@pytest.mark.parametrize("value", [5, "x", [1, "a"], [-1], [True]])
def test_thinking_token_ids_must_be_a_list_of_token_ids(name, value):
    fields = {"thinking_token_budget": 1, "thinking_end_token_ids": [7], name: value}
    with pytest.raises(ValueError, match=name):
        SamplingParams(**fields)


@pytest.mark.parametrize("value", [[5], [[]], [[1, "a"]], [[-1]], "x"])
def test_other_thinking_ends_must_be_lists_of_token_ids(value):
    with pytest.raises(ValueError, match="thinking_other_end_token_ids"):
        SamplingParams(thinking_other_end_token_ids=value)


@pytest.mark.parametrize(
    ("fields", "name"),
    [
        ({"thinking_other_end_token_ids": [[1, 8192]]}, "thinking_other_end_token_ids"),
        ({"logit_bias": {8192: 1.0}}, "logit_bias"),
        ({"allowed_token_ids": [1, 10**9]}, "allowed_token_ids"),
        ({"bad_words_token_ids": [[1, 8192]]}, "bad_words_token_ids"),
        ({"thinking_token_budget": 0, "thinking_end_token_ids": [8192]}, "thinking_end_token_ids"),
        (
            {"thinking_token_budget": 0, "thinking_end_token_ids": [1], "thinking_start_token_ids": [9000]},
            "thinking_start_token_ids",
        ),
    ],
)
def test_check_vocab_names_the_field_with_an_id_outside_the_vocabulary(fields, name):
    params = SamplingParams(**fields)
    with pytest.raises(ValueError, match=rf"^{name}: token id \d+ is outside the vocabulary \[0, 8192\)"):
        params.check_vocab(8192)


def test_check_vocab_passes_ids_inside_the_vocabulary_and_any_stop_token_id():
    SamplingParams(
        logit_bias={8191: -100}, allowed_token_ids=[0, 8191], bad_words_token_ids=[[3, 4]], stop_token_ids=[10**9]
    ).check_vocab(8192)


@pytest.mark.parametrize(
    ("fields", "name"),
    [
        ({"seed": "x"}, "seed"),
        ({"seed": 1.5}, "seed"),
        ({"max_model_len": 1.5}, "max_model_len"),
        ({"max_model_len": "100"}, "max_model_len"),
        ({"max_model_len": True}, "max_model_len"),
        ({"num_kv_blocks": 2.5}, "num_kv_blocks"),
        ({"num_kv_blocks": "5"}, "num_kv_blocks"),
        ({"gpu_memory_utilization": "0.5"}, "gpu_memory_utilization"),
        ({"cpu_offload_gb": float("nan")}, "cpu_offload_gb"),
        ({"cpu_offload_gb": float("inf")}, "cpu_offload_gb"),
        ({"kv_offloading_size": float("nan")}, "kv_offloading_size"),
        ({"kv_offloading_size": float("inf")}, "kv_offloading_size"),
    ],
)
def test_engine_config_names_a_field_of_the_wrong_type_or_not_finite(fields, name):
    with pytest.raises(ValueError, match=rf"^{name} must be"):
        EngineConfig(**fields)
