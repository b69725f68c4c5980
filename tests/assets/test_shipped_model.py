"""The shipped reference model (model_optimizer/assets/pydoc-qwen3) loads in transformers,
writes readable documentation-like English, and its tokenizer and chat template behave.
Skipped until the trained folder is installed."""

from __future__ import annotations

import json
import math
import re

import pytest
import torch
from conftest import ASSET_DIR

pytestmark = pytest.mark.skipif(
    not (ASSET_DIR / "model.safetensors").is_file(), reason="reference model not installed yet"
)

# A passage in the style of the Python docs (written for this test, not copied from them).
DOC_TEXT = (
    "The json module can serialize a Python dictionary to a string. Use json.dumps() to\n"
    "get the string and json.loads() to turn it back into an object:\n\n"
    ">>> import json\n>>> json.dumps({'a': [1, 2, 3]})\n'{\"a\": [1, 2, 3]}'\n\n"
    "If the argument is not a valid document, a ValueError is raised."
)


@pytest.fixture(scope="module")
def tokenizer():
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(str(ASSET_DIR))


@pytest.fixture(scope="module")
def model():
    from transformers import AutoModelForCausalLM

    return AutoModelForCausalLM.from_pretrained(str(ASSET_DIR), dtype=torch.float32).eval()


def test_folder_is_a_small_bf16_qwen3_checkpoint():
    config = json.loads((ASSET_DIR / "config.json").read_text())
    assert config["architectures"] == ["Qwen3ForCausalLM"]
    assert config.get("torch_dtype", config.get("dtype")) == "bfloat16"
    assert (ASSET_DIR / "model.safetensors").stat().st_size <= 30_000_000
    for name in ("generation_config.json", "tokenizer.json", "tokenizer_config.json", "README.md"):
        assert (ASSET_DIR / name).is_file()


def test_tokenizer_round_trips_documentation_text(tokenizer):
    ids = tokenizer(DOC_TEXT).input_ids
    assert tokenizer.decode(ids) == DOC_TEXT
    assert len(ids) < len(DOC_TEXT) / 2.5  # a trained BPE, not bytes


def test_chat_template_renders_chatml(tokenizer):
    messages = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "What is a list?"}]
    text = tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
    assert text == (
        "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nWhat is a list?<|im_end|>\n<|im_start|>assistant\n"
    )
    im_start, im_end = tokenizer.convert_tokens_to_ids(["<|im_start|>", "<|im_end|>"])
    ids = tokenizer(text).input_ids
    assert ids.count(im_start) == 3 and ids.count(im_end) == 2
    assert tokenizer.eos_token_id == im_end


@pytest.mark.slow
def test_perplexity_on_unseen_doc_text_is_low(model, tokenizer):
    ids = tokenizer(DOC_TEXT, return_tensors="pt").input_ids
    with torch.no_grad():
        loss = model(input_ids=ids, labels=ids).loss.item()
    assert math.exp(loss) < 100  # a uniform guess over the vocabulary scores 8192


def test_reported_perplexity_beats_unigram_tenfold():
    metrics = json.loads((ASSET_DIR / "training_metrics.json").read_text())
    assert metrics["val_perplexity"] <= 0.1 * metrics["unigram_val_perplexity"]


@pytest.mark.slow
def test_greedy_generation_is_readable_english(model, tokenizer):
    ids = tokenizer("The json module", return_tensors="pt").input_ids
    out = model.generate(ids, max_new_tokens=32, do_sample=False)
    text = tokenizer.decode(out[0, ids.shape[1] :], skip_special_tokens=True)
    words = re.findall(r"[A-Za-z]+", text)
    assert len(words) >= 8, text
    assert len({w.lower() for w in words}) >= 6, text  # not one word repeated
    common = {"the", "a", "of", "to", "is", "and", "in", "for", "be", "an", "as", "this", "that", "it", "or"}
    assert any(w.lower() in common for w in words), text


def test_reference_model_path_points_at_the_folder():
    from model_optimizer.assets import reference_model_path

    assert reference_model_path() == ASSET_DIR
