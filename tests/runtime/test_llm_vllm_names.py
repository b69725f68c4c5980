"""LLM(...) and the names vLLM code reaches for: an unknown keyword is a TypeError naming LLM() and the
closest setting; `llm.llm_engine` is the step-by-step engine."""

from __future__ import annotations

import pytest

from model_optimizer import LLM, SamplingParams


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        (
            {"max_model_length": 64},
            r"LLM\(\) got an unexpected keyword argument 'max_model_length' \(did you mean 'max_model_len'\?\)",
        ),
        ({"gpu_memory_util": 0.5}, "did you mean 'gpu_memory_utilization'"),
        ({"zzz": 1}, "unexpected keyword argument 'zzz' \\(see EngineConfig"),
    ],
)
def test_an_unknown_keyword_is_a_type_error_naming_llm_and_the_closest_setting(tiny_model, kwargs, message):
    with pytest.raises(TypeError, match=message):
        LLM(str(tiny_model("qwen3")), **kwargs)


def test_a_vllm_server_only_flag_stays_an_unknown_keyword(tiny_model):
    with pytest.raises(TypeError, match="unexpected keyword argument 'middleware'"):
        LLM(str(tiny_model("qwen3")), middleware="x")


def test_llm_engine_is_the_step_by_step_engine(qwen3_llm):
    engine = qwen3_llm.llm_engine
    assert engine is qwen3_llm.engine
    engine.add_request("step-by-step", [5, 6, 7], SamplingParams(max_tokens=2, temperature=0, ignore_eos=True))
    finished = []
    while engine.has_unfinished_requests():
        finished += [o for o in engine.step() if o.finished]
    assert [(o.request_id, len(o.outputs[0].token_ids)) for o in finished] == [("step-by-step", 2)]


def test_llm_engine_aborts_requests_and_gives_its_tokenizer_as_vllms_does(qwen3_llm):
    engine = qwen3_llm.llm_engine
    assert engine.get_tokenizer() is engine.tokenizer is not None  # the one it detokenizes with
    params = SamplingParams(max_tokens=50, temperature=0, ignore_eos=True)
    for request_id in ("a", "b", "c"):
        engine.add_request(request_id, [5, 6, 7], params)
    engine.abort_request("a")
    engine.abort_request(["b", "c"])
    assert not engine.has_unfinished_requests()
    assert engine.step() == []


def test_a_tokens_prompt_dict_takes_a_tuple_as_a_bare_prompt_does(qwen3_llm):
    params = SamplingParams(max_tokens=3, temperature=0, ignore_eos=True)
    bare = qwen3_llm.generate((5, 6, 7), params, use_tqdm=False)
    [out] = qwen3_llm.generate({"prompt_token_ids": (5, 6, 7)}, params, use_tqdm=False)
    assert out.prompt_token_ids == [5, 6, 7] and out.outputs[0].token_ids == bare[0].outputs[0].token_ids
