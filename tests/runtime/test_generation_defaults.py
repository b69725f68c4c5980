"""Sampling defaults from the model folder's generation_config.json, as vLLM applies them:
`LLM.default_sampling_params()`, `LLM.generate` without params, and `mopt generate` for every field
the user did not set."""

from __future__ import annotations

import json
import shutil

import pytest

from model_optimizer import LLM, SamplingParams
from model_optimizer.cli.main import main

KV = ["--kv-cache-memory", str(1 << 22)]


@pytest.fixture
def model_with_defaults(tiny_model, tmp_path):
    """The tiny Qwen3 with a generation_config.json that asks for greedy decoding and 4 new tokens."""
    model = tmp_path / "model"
    shutil.copytree(tiny_model("qwen3"), model)
    (model / "generation_config.json").write_text(
        json.dumps(
            {
                "temperature": 0.0,
                "top_p": 0.8,
                "top_k": 20,
                "min_p": 0.05,
                "repetition_penalty": 1.1,
                "max_new_tokens": 4,
                "do_sample": True,
                "eos_token_id": 2,
                "presence_penalty": 1.5,
                "max_length": 100,
            }
        )
    )
    return model


def test_default_sampling_params_reads_only_the_sampling_fields(model_with_defaults):
    llm = LLM(str(model_with_defaults), kv_cache_memory=1 << 22)
    assert llm.default_sampling_params() == SamplingParams(
        temperature=0.0, top_p=0.8, top_k=20, min_p=0.05, repetition_penalty=1.1, max_tokens=4
    )
    llm.default_sampling_params().max_tokens = 99  # each call returns a fresh object
    assert llm.default_sampling_params().max_tokens == 4


def test_without_generation_config_the_defaults_are_samplingparams_defaults(tiny_model, tmp_path):
    model = tmp_path / "model"
    shutil.copytree(tiny_model("qwen3"), model)
    (model / "generation_config.json").unlink(missing_ok=True)
    assert LLM(str(model), kv_cache_memory=1 << 22).default_sampling_params() == SamplingParams()


def test_llm_generate_without_params_uses_the_defaults(model_with_defaults):
    llm = LLM(str(model_with_defaults), kv_cache_memory=1 << 22)
    out = llm.generate([[5, 6, 7]])[0].outputs[0]
    assert len(out.token_ids) == 4 or out.finish_reason == "stop"
    greedy = llm.generate([[5, 6, 7]], llm.default_sampling_params())[0].outputs[0]
    assert out.token_ids == greedy.token_ids


@pytest.mark.parametrize(
    ("values", "message"),
    [
        ({"temperature": "hot"}, "temperature must be a finite number >= 0, got 'hot'"),
        ({"max_new_tokens": 0}, "max_tokens must be an integer >= 1"),
    ],
)
def test_bad_generation_config_names_the_file(model_with_defaults, values, message):
    """Found when the LLM is made, before its weights load (as mopt serve refuses it at start-up)."""
    path = model_with_defaults / "generation_config.json"
    path.write_text(json.dumps(values))
    with pytest.raises(ValueError) as info:
        LLM(str(model_with_defaults), kv_cache_memory=1 << 22)
    assert str(path) in str(info.value) and message in str(info.value)


def test_mopt_generate_applies_the_defaults_to_unset_fields(model_with_defaults, tmp_path):
    out = tmp_path / "out.jsonl"
    prompts = tmp_path / "in.jsonl"
    prompts.write_text(
        "\n".join(
            json.dumps(row)
            for row in [
                {"prompt_token_ids": [5, 6, 7]},  # all from generation_config.json
                {"prompt_token_ids": [5, 6, 7], "max_tokens": 2},  # the line wins
            ]
        )
        + "\n"
    )
    assert (
        main(
            [
                "generate",
                "--model",
                str(model_with_defaults),
                "--prompts-file",
                str(prompts),
                "--ignore-eos",
                "--output",
                str(out),
                *KV,
            ]
        )
        == 0
    )
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert [len(r["outputs"][0]["token_ids"]) for r in rows] == [4, 2]
    assert rows[1]["outputs"][0]["token_ids"] == rows[0]["outputs"][0]["token_ids"][:2]  # greedy from the file

    assert (
        main(
            [
                "generate",
                "--model",
                str(model_with_defaults),
                "--prompts-file",
                str(prompts),
                "--ignore-eos",
                "--max-tokens",
                "6",
                "--output",
                str(out),
                *KV,
            ]
        )
        == 0
    )
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert [len(r["outputs"][0]["token_ids"]) for r in rows] == [6, 2]  # the flag beats the file, the line the flag
