"""LLM.beam_search: the beams transformers' generate(num_beams=...) finds, EOS handling and refusals."""

from __future__ import annotations

import json
import shutil

import pytest
import torch

from model_optimizer import LLM, BeamSearchParams
from model_optimizer.runtime.beam_search import MAX_BEAM_WIDTH, BeamSearch, beam_search_score
from model_optimizer.runtime.sampler_output import Logprob

PROMPTS = [[5, 17, 42, 8, 99, 3], [250, 12, 7]]


def transformers_beams(model_dir, prompt: list[int], width: int, new: int) -> list[list[int]]:
    """transformers' num_beams search without an EOS (so its candidates and ours are the same top tokens)."""
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(str(model_dir), dtype=torch.float32, attn_implementation="eager")
    out = model.eval().generate(
        torch.tensor([prompt]),
        num_beams=width,
        num_return_sequences=width,
        max_new_tokens=new,
        do_sample=False,
        eos_token_id=None,
        pad_token_id=0,
        length_penalty=1.0,
    )
    return [row[len(prompt) :].tolist() for row in out]


@pytest.mark.parametrize("width", [1, 3])
def test_beams_equal_transformers_num_beams(qwen3_llm, tiny_model, width):
    params = BeamSearchParams(beam_width=width, max_tokens=5, ignore_eos=True)
    outputs = qwen3_llm.beam_search([{"prompt_token_ids": p} for p in PROMPTS], params)
    assert len(outputs) == len(PROMPTS)
    for prompt, output in zip(PROMPTS, outputs):
        found = [seq.tokens[len(prompt) :] for seq in output.sequences]
        assert found == transformers_beams(tiny_model("qwen3"), prompt, width, 5)
        for seq in output.sequences:
            assert seq.tokens[: len(prompt)] == prompt and seq.finish_reason == "length"
            assert len(seq.logprobs) == 5
            assert seq.cum_logprob == pytest.approx(
                sum(lp[t].logprob for lp, t in zip(seq.logprobs, seq.tokens[len(prompt) :]))
            )
            assert seq.text == qwen3_llm.tokenizer.decode(seq.tokens[len(prompt) :])
        scores = [s.cum_logprob for s in output.sequences]
        assert scores == sorted(scores, reverse=True)


def test_width_one_is_greedy(qwen3_llm):
    from model_optimizer import SamplingParams

    beam = qwen3_llm.beam_search("hello world", BeamSearchParams(beam_width=1, max_tokens=6, ignore_eos=True))
    greedy = qwen3_llm.generate("hello world", SamplingParams(temperature=0, max_tokens=6, ignore_eos=True))
    prompt = greedy[0].prompt_token_ids
    assert beam[0].sequences[0].tokens == prompt + greedy[0].outputs[0].token_ids


@pytest.fixture(scope="module")
def eos_first_llm(tiny_model, tmp_path_factory):
    """The tiny Qwen3 whose EOS is the token greedy decoding picks first after PROMPTS[0]."""
    source = tiny_model("qwen3")
    with LLM(str(source), kv_cache_memory=1 << 24) as llm:
        first = llm.beam_search([PROMPTS[0]], BeamSearchParams(1, 1, ignore_eos=True))[0].sequences[0].tokens[-1]
    out = tmp_path_factory.mktemp("eos_first") / "qwen3"
    shutil.copytree(source, out)
    config = (
        json.loads((out / "generation_config.json").read_text()) if (out / "generation_config.json").is_file() else {}
    )
    (out / "generation_config.json").write_text(json.dumps({**config, "eos_token_id": first}))
    llm = LLM(str(out), kv_cache_memory=1 << 24)
    yield llm, first
    llm.close()


def test_a_beam_ending_in_eos_is_set_aside_finished(eos_first_llm):
    llm, eos = eos_first_llm
    params = BeamSearchParams(beam_width=3, max_tokens=4, length_penalty=0.0)
    sequences = llm.beam_search([PROMPTS[0]], params)[0].sequences
    stopped = [s for s in sequences if s.finish_reason == "stop"]
    assert stopped and all(s.tokens.index(eos, len(PROMPTS[0])) == len(s.tokens) - 1 for s in stopped)
    # the EOS-ended candidate is the most likely first step; with length_penalty 0 it outranks every longer beam
    assert sequences[0].finish_reason == "stop" and sequences[0].tokens == PROMPTS[0] + [eos]
    assert sequences[0].stop_reason == eos
    assert sequences[0].text == llm.tokenizer.decode([])
    assert all(eos not in s.tokens[len(PROMPTS[0]) :] for s in sequences if s.finish_reason == "length")
    kept = llm.beam_search([PROMPTS[0]], BeamSearchParams(3, 4, length_penalty=0.0, include_stop_str_in_output=True))
    assert kept[0].sequences[0].text == llm.tokenizer.decode([eos])


def test_the_search_stops_when_the_context_is_full(tiny_model):
    with LLM(str(tiny_model("qwen3")), kv_cache_memory=1 << 24, max_model_len=10) as llm:
        sequences = llm.beam_search([PROMPTS[0]], BeamSearchParams(2, 50, ignore_eos=True))[0].sequences
        assert all(len(s.tokens) == 10 and s.finish_reason == "length" for s in sequences)
        with pytest.raises(ValueError, match="no token could follow"):
            llm.beam_search([list(range(1, 11))], BeamSearchParams(2, 5))


def test_with_chunked_prefill_off_beams_stop_at_the_step_budget(tiny_model):
    """Each step sends a beam's tokens as a prompt, which must then fit one step's budget."""
    with LLM(
        str(tiny_model("qwen3")), kv_cache_memory=1 << 24, enable_chunked_prefill=False, max_num_batched_tokens=12
    ) as llm:
        sequences = llm.beam_search([PROMPTS[0]], BeamSearchParams(2, 50, ignore_eos=True))[0].sequences
        assert all(len(s.tokens) == 13 and s.finish_reason == "length" for s in sequences)


@pytest.mark.parametrize(
    "fields, match",
    [
        (dict(beam_width=0, max_tokens=4), "beam_width"),
        (dict(beam_width=MAX_BEAM_WIDTH + 1, max_tokens=4), "beam_width"),
        (dict(beam_width=True, max_tokens=4), "beam_width"),
        (dict(beam_width=2, max_tokens=0), "max_tokens"),
        (dict(beam_width=2, max_tokens=4, temperature=-1), "temperature"),
        (dict(beam_width=2, max_tokens=4, length_penalty=float("nan")), "length_penalty"),
        (dict(beam_width=2, max_tokens=4, ignore_eos="yes"), "ignore_eos"),
    ],
)
def test_bad_params_are_refused(fields, match):
    with pytest.raises(ValueError, match=match):
        BeamSearchParams(**fields)


def test_bad_calls_are_refused(qwen3_llm):
    with pytest.raises(TypeError, match="BeamSearchParams"):
        qwen3_llm.beam_search("hi", {"beam_width": 2, "max_tokens": 3})
    with pytest.raises(ValueError, match="at least one token"):
        qwen3_llm.beam_search([[]], BeamSearchParams(2, 3))


def test_score_divides_by_the_length_without_a_final_eos():
    assert beam_search_score([1, 2, 3, 9], -2.0, {9}, 1.0) == pytest.approx(-2.0 / 3)
    assert beam_search_score([1, 2, 3, 4], -2.0, {9}, 2.0) == pytest.approx(-2.0 / 16)
    assert beam_search_score([1, 2, 3, 4], -2.0, {9}, 0.0) == -2.0


def test_unreachable_tokens_never_become_candidates():
    search = BeamSearch([1, 2], BeamSearchParams(2, 3), {7}, 100)
    search.advance([Logprob(5, -0.1, 1, {5: -0.1, 6: float("-inf"), 7: -3.0})])
    assert [b.tokens for b in search.beams] == [[1, 2, 5]]
    assert [b.tokens for b in search.finished] == [[1, 2, 7]]
