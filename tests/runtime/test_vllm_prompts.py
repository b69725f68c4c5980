"""vLLM's offline API shapes: TextPrompt / TokensPrompt dicts in LLM.generate, and skip_tokenizer_init for
a folder with real weights and no tokenizer (token ids in, token ids out)."""

from __future__ import annotations

import shutil

import pytest

from model_optimizer import LLM, SamplingParams
from model_optimizer.runtime.models.tokenizer import TOKENIZER_FILES

GREEDY = SamplingParams(max_tokens=6, temperature=0.0, ignore_eos=True)
IDS = [5, 6, 7, 8, 9]


@pytest.fixture(scope="module")
def llm(tiny_model):
    return LLM(str(tiny_model("qwen3")), max_model_len=128, num_kv_blocks=64)


def test_tokens_prompt_and_text_prompt_dicts(llm):
    plain = llm.generate([IDS, "import json"], GREEDY)
    dicts = llm.generate([{"prompt_token_ids": IDS}, {"prompt": "import json"}], GREEDY)
    assert [o.outputs[0].token_ids for o in dicts] == [o.outputs[0].token_ids for o in plain]
    one = llm.generate({"prompt_token_ids": IDS}, GREEDY)  # a single dict, as vLLM takes it
    assert one[0].outputs[0].token_ids == plain[0].outputs[0].token_ids


@pytest.mark.parametrize("bad", [{"prompt_ids": IDS}, {"prompt": IDS}, {}])
def test_a_malformed_prompt_dict_says_what_it_takes(llm, bad):
    with pytest.raises(ValueError, match="prompt"):
        llm.generate([bad], GREEDY)


def test_skip_tokenizer_init_serves_a_folder_without_a_tokenizer(tiny_model, tmp_path, llm):
    folder = tmp_path / "no-tokenizer"
    shutil.copytree(tiny_model("qwen3"), folder)
    for name in TOKENIZER_FILES:
        (folder / name).unlink(missing_ok=True)
    bare = LLM(str(folder), max_model_len=128, num_kv_blocks=64, skip_tokenizer_init=True)
    assert bare.tokenizer is None
    out = bare.generate([{"prompt_token_ids": IDS}], GREEDY)[0].outputs[0]
    assert out.token_ids == llm.generate([IDS], GREEDY)[0].outputs[0].token_ids  # the same weights
    assert out.text == ""
    with pytest.raises(ValueError, match="tokenizer"):
        bare.generate(["text needs a tokenizer"], GREEDY)
    with pytest.raises(ValueError, match="stop strings need a tokenizer"):
        bare.generate([IDS], SamplingParams(max_tokens=4, stop=["x"]))
