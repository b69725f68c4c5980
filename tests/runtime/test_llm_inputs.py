"""The offline API as a vLLM user calls it: a TokensPrompt that carries its text, vLLM's other prompt keys,
token ids as NumPy or torch arrays, beam_search's lora_request and concurrency_limit, priorities without the
priority policy, and a prompt the engine refuses named by its place among the prompts."""

from __future__ import annotations

import logging

import numpy as np
import pytest
import torch

from model_optimizer import LLM, BeamSearchParams, SamplingParams

GREEDY = SamplingParams(temperature=0, max_tokens=4, ignore_eos=True)
IDS = [42, 71, 364, 81]


@pytest.fixture(scope="module")
def short_llm(tiny_model):
    """A context of 64 tokens, so that a long prompt is refused."""
    return LLM(str(tiny_model("qwen3")), max_model_len=64, num_kv_blocks=64)


def _token_ids(outputs) -> list[list[int]]:
    return [o.outputs[0].token_ids for o in outputs]


def test_a_tokens_prompt_with_its_text_runs_the_ids_and_reports_the_text(qwen3_llm):
    [bare] = qwen3_llm.generate({"prompt_token_ids": IDS}, GREEDY, use_tqdm=False)
    [given] = qwen3_llm.generate({"prompt_token_ids": IDS, "prompt": "what the ids say"}, GREEDY, use_tqdm=False)
    assert given.prompt == "what the ids say" and bare.prompt is None
    assert given.prompt_token_ids == IDS and _token_ids([given]) == _token_ids([bare])
    mixed = qwen3_llm.generate(["hello", {"prompt_token_ids": IDS, "prompt": "t"}, IDS], GREEDY, use_tqdm=False)
    assert [o.prompt for o in mixed] == ["hello", "t", None]


def test_vllms_empty_multimodal_keys_are_taken_and_what_needs_more_than_text_is_refused(qwen3_llm):
    plain = qwen3_llm.generate("hello", GREEDY, use_tqdm=False)
    empty = {"multi_modal_data": None, "mm_processor_kwargs": {}, "multi_modal_uuids": None}
    assert _token_ids(qwen3_llm.generate({"prompt": "hello", **empty}, GREEDY, use_tqdm=False)) == _token_ids(plain)
    with pytest.raises(ValueError, match="multi_modal_data.*text only"):
        qwen3_llm.generate({"prompt": "hello", "multi_modal_data": {"image": "cat.png"}}, GREEDY, use_tqdm=False)
    with pytest.raises(ValueError, match="cache_salt is not supported"):
        qwen3_llm.generate({"prompt": "hello", "cache_salt": "tenant-1"}, GREEDY, use_tqdm=False)
    with pytest.raises(ValueError, match="unknown key.*'promt'"):
        qwen3_llm.generate({"promt": "hello"}, GREEDY, use_tqdm=False)


@pytest.mark.parametrize(
    "prompts",
    [
        np.array(IDS),
        torch.tensor(IDS),
        [np.array(IDS)],
        np.array([IDS]),
        [[np.int64(t) for t in IDS]],
        {"prompt_token_ids": np.array(IDS, dtype=np.int32)},
    ],
    ids=["ndarray", "tensor", "list-of-ndarray", "2d-ndarray", "numpy-ints", "tokens-prompt-ndarray"],
)
def test_token_ids_from_numpy_or_torch_are_a_prompt(qwen3_llm, prompts):
    [expected] = qwen3_llm.generate([IDS], GREEDY, use_tqdm=False)
    [output] = qwen3_llm.generate(prompts, GREEDY, use_tqdm=False)
    assert output.prompt_token_ids == IDS and type(output.prompt_token_ids[0]) is int
    assert _token_ids([output]) == _token_ids([expected])


def test_beam_search_takes_vllms_lora_request_and_concurrency_limit(qwen3_llm):
    params = BeamSearchParams(beam_width=2, max_tokens=3, ignore_eos=True)
    prompts = ["hello", {"prompt_token_ids": IDS}, "the json module"]
    together = qwen3_llm.beam_search(prompts, params)
    for limit in (1, 2):
        apart = qwen3_llm.beam_search(prompts, params, None, False, limit)
        assert [[s.tokens for s in o.sequences] for o in apart] == [[s.tokens for s in o.sequences] for o in together]
    assert qwen3_llm.beam_search(prompts[:1], params, lora_request=None, concurrency_limit=None)
    with pytest.raises(ValueError, match="LoRA"):
        qwen3_llm.beam_search(prompts, params, lora_request=object())
    for bad in (0, -1, 1.5, True):
        with pytest.raises(ValueError, match="concurrency_limit must be"):
            qwen3_llm.beam_search(prompts, params, concurrency_limit=bad)


def test_priorities_without_the_priority_policy_are_warned_of(qwen3_llm, caplog):
    with caplog.at_level(logging.WARNING, logger="model_optimizer.runtime.llm"):
        qwen3_llm.generate(["a", "b"], GREEDY, use_tqdm=False, priority=[0, 0])
        assert not caplog.records
        qwen3_llm.generate(["a", "b"], GREEDY, use_tqdm=False, priority=[1, 0])
    [record] = caplog.records
    assert "scheduling_policy" in record.getMessage() and "fcfs" in record.getMessage()


def test_numpy_priorities_are_integers(qwen3_llm):
    outputs = qwen3_llm.generate(["a", "b"], GREEDY, use_tqdm=False, priority=np.array([0, 0]))
    assert len(outputs) == 2


def test_a_prompt_the_engine_refuses_is_named_by_its_place_and_nothing_stays_queued(short_llm):
    long = "hello world " * 40
    with pytest.raises(ValueError, match=r"^prompts\[1\]: prompt has \d+ tokens, more than max_model_len"):
        short_llm.generate(["hi", long, "there"], GREEDY, use_tqdm=False)
    assert not short_llm.engine.has_unfinished_requests()
    with pytest.raises(ValueError, match=r"^prompt has \d+ tokens"):  # one prompt: nothing to tell apart
        short_llm.generate(long, GREEDY, use_tqdm=False)
    conversations = [[{"role": "user", "content": "hi"}], [{"role": "user", "content": long}]]
    with pytest.raises(ValueError, match=r"^messages\[1\]: prompt has"):
        short_llm.chat(conversations, GREEDY, use_tqdm=False)
    assert _token_ids(short_llm.generate(["hi"], GREEDY, use_tqdm=False))
