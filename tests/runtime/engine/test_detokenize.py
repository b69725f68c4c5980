"""Incremental detokenization with a real byte-level BPE tokenizer: no half characters, stop strings held back."""

from __future__ import annotations

import pytest
from transformers import AutoTokenizer

from model_optimizer.runtime.engine.detokenizer import IncrementalDetokenizer
from model_optimizer.runtime.engine.input_processor import encode_prompt
from model_optimizer.runtime.sampling_params import SamplingParams

TEXTS = [
    "naïve café 😀🚀 日本語のテキスト and Ελληνικά",
    "def fibonacci(n):\n    return n  # naïve → 😀",
    "🤖🤖🤖 emoji only 👩‍👩‍👧",
]


@pytest.fixture(scope="module")
def tokenizer(tiny_model):
    return AutoTokenizer.from_pretrained(str(tiny_model("qwen3")))


@pytest.mark.parametrize("text", TEXTS)
def test_streamed_text_never_holds_half_a_character(tokenizer, text):
    ids = tokenizer.encode(text)
    detok = IncrementalDetokenizer(tokenizer, [tokenizer.encode("Hi")[0]], SamplingParams())
    seen = []
    for token_id in ids:
        detok.add_token(token_id)
        seen.append(detok.visible_text(finished=False))
    assert seen[-1] == text
    assert all("\ufffd" not in s and text.startswith(s) for s in seen)
    multibyte_tokens = sum(1 for t in ids if "\ufffd" in tokenizer.decode([t]))
    assert multibyte_tokens > 0  # the case under test really happens


def test_stop_string_is_held_back_until_ruled_out(tokenizer):
    text = "alpha beta gamma delta"
    detok = IncrementalDetokenizer(tokenizer, [5], SamplingParams(stop=["gamma"]))
    shown, stop = [], None
    for token_id in tokenizer.encode(text):
        stop = detok.add_token(token_id)
        shown.append(detok.visible_text(finished=stop is not None))
        if stop:
            break
    assert stop == "gamma" and shown[-1] == "alpha beta "
    assert all("gam" not in s for s in shown)


def test_include_stop_string_keeps_it(tokenizer):
    detok = IncrementalDetokenizer(tokenizer, [5], SamplingParams(stop=["beta"], include_stop_str_in_output=True))
    for token_id in tokenizer.encode("alpha beta gamma"):
        if detok.add_token(token_id):
            break
    assert detok.visible_text(finished=True) == "alpha beta"


def test_encode_prompt_checks_ids(tokenizer):
    assert encode_prompt(tokenizer, "hello", 100) == tokenizer.encode("hello")
    with pytest.raises(ValueError, match="outside the vocabulary"):
        encode_prompt(tokenizer, [1, -1], 100)
    with pytest.raises(ValueError, match="empty"):
        encode_prompt(tokenizer, "", 100)
