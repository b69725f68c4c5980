"""decoded_token on the offline API's logprobs, as vLLM's Logprob has it: every entry of sample and prompt
logprobs (the chosen token and its alternatives) carries its id decoded alone by the model's tokenizer,
special tokens included whatever skip_special_tokens; None when the request does not detokenize or the
model has no tokenizer. The tiny Qwen3 and its own tokenizer, through LLM, chat and the async engine."""

from __future__ import annotations

import pickle

import pytest
from transformers import AutoTokenizer

from model_optimizer import LLM, SamplingParams
from model_optimizer.runtime.engine.async_engine import AsyncEngine
from model_optimizer.runtime.sampler_output import TokenLogprob
from model_optimizer.runtime.sampling_params import RequestOutputKind
from tests.async_run import run

PROMPT = "The json module"


@pytest.fixture(scope="module")
def folder(tiny_model):
    return str(tiny_model("qwen3"))


@pytest.fixture(scope="module")
def llm(folder):
    return LLM(folder, max_model_len=128, num_kv_blocks=64)


@pytest.fixture(scope="module")
def hf(folder):
    return AutoTokenizer.from_pretrained(folder)


def params(**fields) -> SamplingParams:
    return SamplingParams(**{"max_tokens": 6, "temperature": 1.0, "seed": 7, "ignore_eos": True, **fields})


def texts(hf, token_ids) -> dict[int, str]:
    """vLLM's rule: each id decoded alone with the tokenizer's default skip_special_tokens (False)."""
    return {t: hf.decode([t]) for t in token_ids}


def assert_sample_named(hf, completion) -> None:
    assert len(completion.logprobs) == len(completion.token_ids)
    for token, position in zip(completion.token_ids, completion.logprobs):
        want = texts(hf, position)
        assert position.decoded_token == want[token]
        assert {t: lp.decoded_token for t, lp in position.items()} == want
        assert position[token] == TokenLogprob(position.logprob, position.rank, want[token])


def assert_prompt_named(hf, output) -> None:
    assert output.prompt_logprobs[0] is None
    for token, entry in zip(output.prompt_token_ids[1:], output.prompt_logprobs[1:]):
        assert token in entry
        assert {t: lp.decoded_token for t, lp in entry.items()} == texts(hf, entry)


def test_sample_and_prompt_logprobs_carry_each_ids_own_decode(llm, hf):
    [out] = llm.generate([PROMPT], params(logprobs=4, prompt_logprobs=3, n=2), use_tqdm=False)
    for completion in out.outputs:
        assert_sample_named(hf, completion)
    assert_prompt_named(hf, out)


def test_special_tokens_keep_their_text_whatever_skip_special_tokens(llm, hf):
    special = hf.convert_tokens_to_ids("<|im_end|>")
    prompt = hf.encode("hi") + [special] + hf.encode(" there")
    for skip in (True, False):
        [out] = llm.generate([prompt], params(prompt_logprobs=2, skip_special_tokens=skip), use_tqdm=False)
        at = prompt.index(special)
        assert out.prompt_logprobs[at][special].decoded_token == "<|im_end|>"
        assert_prompt_named(hf, out)


def test_no_text_without_detokenizing_or_a_tokenizer(llm, folder):
    plain = params(logprobs=3, prompt_logprobs=2, detokenize=False)
    [out] = llm.generate([PROMPT], plain, use_tqdm=False)
    bare = LLM(folder, max_model_len=128, num_kv_blocks=16, skip_tokenizer_init=True)
    [bare_out] = bare.generate([[5, 6, 7, 8]], params(logprobs=3, prompt_logprobs=2), use_tqdm=False)
    for result in (out, bare_out):
        sample = [lp for position in result.outputs[0].logprobs for _, lp in position.items()]
        prompt = [lp for entry in result.prompt_logprobs[1:] for lp in entry.values()]
        assert sample and prompt
        assert {lp.decoded_token for lp in sample + prompt} == {None}
        assert {position.decoded_token for position in result.outputs[0].logprobs} == {None}


def test_chat_logprobs_are_named(llm, hf):
    [out] = llm.chat([{"role": "user", "content": "hi"}], params(logprobs=2), use_tqdm=False)
    assert_sample_named(hf, out.outputs[0])


def test_names_survive_slicing_copying_and_pickling(llm, hf):
    [out] = llm.generate([PROMPT], params(logprobs=2, prompt_logprobs=2), use_tqdm=False)
    logprobs = out.outputs[0].logprobs
    for part in (logprobs[1:4], logprobs[::2], logprobs.copy(), logprobs + [], [] + logprobs):
        assert [lp.decoded_token for lp in part] == [hf.decode([lp.token_id]) for lp in part]
    back = pickle.loads(pickle.dumps(out))
    assert back.outputs[0].logprobs == logprobs
    assert_sample_named(hf, back.outputs[0])
    assert_prompt_named(hf, back)


def test_async_deltas_are_named(llm, hf):
    async def body(engine: AsyncEngine):
        delta = params(logprobs=3, output_kind=RequestOutputKind.DELTA)
        return [o async for o in engine.generate("r", PROMPT, delta)]

    deltas = run(llm, body)
    assert len(deltas) > 1
    for output in deltas:
        assert_sample_named(hf, output.outputs[0])


def test_beam_search_logprobs_are_named(llm, hf):
    from model_optimizer import BeamSearchParams

    [output] = llm.beam_search(["import json"], BeamSearchParams(beam_width=2, max_tokens=4))
    for beam in output.sequences:
        for step in beam.logprobs:
            names = texts(hf, list(step.keys()))
            assert {t: lp.decoded_token for t, lp in step.items()} == names
