"""LLM.generate with arguments of the wrong type or token ids outside the vocabulary: a TypeError or
ValueError naming the argument before anything is queued (not an AttributeError, an IndexError from
the sampler mid-step, or bytes read as token ids); a KV cache larger than the host's memory is refused
before it is allocated. The built-in model (vocabulary 8192) on the CPU."""

from __future__ import annotations

import pytest

from model_optimizer import LLM, SamplingParams

GREEDY = SamplingParams(max_tokens=2, temperature=0)


@pytest.fixture(scope="module")
def llm():
    return LLM(kv_cache_memory=1 << 24)


@pytest.mark.parametrize(
    ("prompts", "message"),
    [
        (None, r"^prompts must be .*got NoneType"),
        (5, r"^prompts must be .*got int"),
        (b"hi", r"^prompts must be .*got bytes"),
        ([1.5], r"^prompts\[0\] must be .*got float"),
        (["ok", None], r"^prompts\[1\] must be .*got NoneType"),
    ],
)
def test_prompts_of_the_wrong_type_are_a_type_error_naming_them(llm, prompts, message):
    with pytest.raises(TypeError, match=message):
        llm.generate(prompts, GREEDY)


@pytest.mark.parametrize(
    ("params", "message"),
    [
        ({"max_tokens": 2}, r"^sampling_params must be a SamplingParams or a list of them, got dict"),
        ("greedy", r"^sampling_params must be a SamplingParams or a list of them, got str"),
        ([{"max_tokens": 2}], r"^sampling_params\[0\] must be a SamplingParams, got dict"),
    ],
)
def test_sampling_params_of_the_wrong_type_are_a_type_error_naming_them(llm, params, message):
    with pytest.raises(TypeError, match=message):
        llm.generate(["hi"], params)


def test_an_empty_list_of_sampling_params_is_not_read_as_the_defaults(llm):
    with pytest.raises(ValueError, match="got 0 sampling params for 1 prompts"):
        llm.generate(["hi"], [])


@pytest.mark.parametrize(
    ("params", "name"),
    [
        (SamplingParams(max_tokens=2, allowed_token_ids=[10**9]), "allowed_token_ids"),
        (SamplingParams(max_tokens=2, logit_bias={10**9: 1.0}), "logit_bias"),
        (SamplingParams(max_tokens=2, bad_words_token_ids=[[10**9]]), "bad_words_token_ids"),
        (
            SamplingParams(max_tokens=2, thinking_token_budget=0, thinking_end_token_ids=[10**9]),
            "thinking_end_token_ids",
        ),
    ],
)
def test_token_ids_outside_the_vocabulary_are_refused_before_any_step(llm, params, name):
    with pytest.raises(ValueError, match=rf"^{name}: token id 1000000000 is outside the vocabulary \[0, 8192\)"):
        llm.generate(["hi", "there"], params)
    assert not llm.engine.has_unfinished_requests()
    [out] = llm.generate(["hi"], GREEDY)  # and the engine goes on
    assert out.outputs[0].finish_reason == "length"


def test_a_kv_cache_beyond_the_hosts_memory_is_refused_before_it_is_allocated():
    with pytest.raises(ValueError, match=r"--kv-cache-memory 1024TiB would take .* GiB of host memory, but only"):
        LLM(kv_cache_memory="1024TiB", device="cpu")


def test_offloaded_layers_beyond_the_hosts_memory_are_refused_on_a_gpu():
    """On a GPU the offloaded layers live in host memory: an offload no host holds is named before loading
    (the load was OOM-killed without a word). The check reads only the settings, so it runs here too."""
    from model_optimizer.runtime.config import EngineConfig
    from model_optimizer.runtime.startup import check_host_memory

    with pytest.raises(ValueError, match=r"--cpu-offload-gb 1e\+06 would take .* GiB of host memory, but only"):
        check_host_memory(EngineConfig(device="cuda", cpu_offload_gb=1e6))
    check_host_memory(EngineConfig(device="cpu", cpu_offload_gb=1e6))  # on the CPU the layers stay where they are


@pytest.mark.parametrize(
    ("constraint", "message"),
    [({"regex": "("}, "invalid regex"), ({"grammar": "start: undefined_rule"}, "invalid grammar")],
)
def test_a_bad_constraint_is_a_value_error_before_anything_is_queued(llm, constraint, message):
    """It was accepted and came back as an output with finish reason "error" and no text, which a caller
    who reads only .text takes for an empty answer."""
    bad = SamplingParams(max_tokens=2, structured_outputs=constraint)
    with pytest.raises(ValueError, match=message) as raised:
        llm.generate(["ok", "also"], [GREEDY, bad])
    assert "\n" not in str(raised.value)
    assert not llm.engine.has_unfinished_requests()
    assert llm.generate(["ok"], SamplingParams(max_tokens=2, structured_outputs={"regex": "a+"}))[0].outputs[0].text


def test_a_closed_llm_refuses_work_and_with_closes_it():
    """close() was a no-op on one device, and generate went on working after it, against its docstring."""
    with LLM(kv_cache_memory=1 << 24) as llm:
        assert llm.generate(["ok"], GREEDY)[0].outputs[0].token_ids
    assert llm.engine is None  # the model and its KV cache are let go
    for call in (lambda: llm.generate(["ok"], GREEDY), lambda: llm.embed(["ok"])):
        with pytest.raises(ValueError, match="this LLM was closed"):
            call()
    llm.close()  # twice is fine
