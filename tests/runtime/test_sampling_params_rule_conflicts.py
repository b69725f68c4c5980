"""Token rules that bar every allowed token from the first step on are refused when the request is made
(SamplingParams, and LLM.generate where the tokenizer and the EOS ids are known), naming allowed_token_ids:
sampling them could only break one rule."""

from __future__ import annotations

import pytest

from model_optimizer.runtime.sampling_checks import unsatisfiable_rules
from model_optimizer.runtime.sampling_params import SamplingParams


@pytest.mark.parametrize(
    "fields, reason",
    [
        ({"allowed_token_ids": [5], "bad_words_token_ids": [[5]]}, "one-token bad_words"),
        ({"allowed_token_ids": [5, 6], "bad_words_token_ids": [[6], [5], [7, 8]]}, "one-token bad_words"),
        ({"allowed_token_ids": [5], "stop_token_ids": [5], "min_tokens": 2}, "before min_tokens (2)"),
        ({"allowed_token_ids": [5], "min_tokens": 1, "min_tokens_barred": (5,)}, "EOS or stop"),
        ({"allowed_token_ids": [5, 6], "bad_words_token_ids": [[5]], "stop_token_ids": [6], "min_tokens": 1}, " or "),
    ],
)
def test_rules_that_bar_every_allowed_token_are_refused(fields, reason):
    with pytest.raises(ValueError, match="allowed_token_ids: every allowed token is barred") as caught:
        SamplingParams(**fields)
    assert reason in str(caught.value)


@pytest.mark.parametrize(
    "fields",
    [
        {"allowed_token_ids": [5, 6], "bad_words_token_ids": [[5]]},  # 6 is left
        {"allowed_token_ids": [5], "bad_words_token_ids": [[4, 5]]},  # barred only after 4
        {"allowed_token_ids": [5], "stop_token_ids": [5]},  # no min_tokens: 5 may end the output
        {"bad_words_token_ids": [[5]], "stop_token_ids": [5], "min_tokens": 3},  # no allowed_token_ids
    ],
)
def test_rules_that_leave_an_allowed_token_are_taken(fields):
    assert SamplingParams(**fields).allowed_token_ids == fields.get("allowed_token_ids")


def test_the_check_reads_end_ids_only_with_min_tokens():
    assert unsatisfiable_rules([2], None, 0, [2]) is None
    assert "min_tokens (3)" in unsatisfiable_rules([2], None, 3, [2])
    assert unsatisfiable_rules(None, [[2]], 3, [2]) is None


@pytest.fixture(scope="module")
def llm(tiny_model):
    from model_optimizer import LLM

    return LLM(str(tiny_model("qwen3")), max_model_len=128, num_kv_blocks=64)


def test_generate_refuses_a_bad_word_that_is_the_only_allowed_token(llm):
    """bad_words are tokenized when the request is queued: the conflict shows there, before any step."""
    [a] = llm.tokenizer.encode("a", add_special_tokens=False)
    params = SamplingParams(max_tokens=4, temperature=0, allowed_token_ids=[a], bad_words=["a"])
    with pytest.raises(ValueError, match="allowed_token_ids: every allowed token is barred .one-token bad_words"):
        llm.generate(["hi"], params)
    [out] = llm.generate(["hi"], params.clone(allowed_token_ids=[a, a + 1]))  # one left: taken, and it holds
    assert set(out.outputs[0].token_ids) == {a + 1}


def test_generate_refuses_eos_as_the_only_allowed_token_before_min_tokens(llm):
    [eos] = sorted(llm.engine.info.eos_token_ids)
    params = SamplingParams(max_tokens=4, temperature=0, allowed_token_ids=[eos], min_tokens=2)
    with pytest.raises(ValueError, match="EOS or stop token id before min_tokens"):
        llm.generate(["hi"], params)
    [out] = llm.generate(["hi"], params.clone(ignore_eos=True))  # EOS is no end then: drawn, and allowed
    assert out.outputs[0].token_ids == [eos] * 4
