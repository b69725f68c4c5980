"""Incremental detokenization with a real byte-level BPE tokenizer: no half characters, stop strings held back."""

from __future__ import annotations

import pytest
from transformers import AutoTokenizer

from model_optimizer.runtime.engine.detokenizer import IncrementalDetokenizer, TokenOffsets, TokenTexts
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


@pytest.mark.parametrize("text", TEXTS)
def test_token_bytes_join_into_the_text_and_offsets_follow_whole_characters(tokenizer, text):
    """Tokens holding part of a character decode alone to U+FFFD; their bytes (logprobs' `bytes`) are their
    own, so joined they give the text, and each token's offset is where its character starts."""
    ids = tokenizer.encode(text)
    texts = TokenTexts(tokenizer)
    tokens = texts.many(ids)
    assert any("\ufffd" in t for t in tokens)  # the case in question is there
    assert b"".join(bytes(texts.bytes_of(t)) for t in ids).decode() == text
    offsets = TokenOffsets(texts, 5).take(ids)
    for i, offset in enumerate(offsets):  # a token starts after the whole characters of those before it
        assert offset == 5 + len(tokenizer.decode(ids[:i]).rstrip("\ufffd"))
    ascii_ids = tokenizer.encode("plain words")
    assert TokenOffsets(texts, 0).take(ascii_ids) == [
        0,
        *[len(tokenizer.decode(ascii_ids[: i + 1])) for i in range(len(ascii_ids) - 1)],
    ]


def test_byte_fallback_pieces_are_their_byte():
    """SentencePiece-style vocabularies (Llama 2, Gemma) write a byte as a <0xNN> piece."""
    from tokenizers import Tokenizer, decoders, models
    from transformers import PreTrainedTokenizerFast

    vocab = {"<unk>": 0, "a": 1, "é": 2, **{f"<0x{b:02X}>": 3 + b for b in range(256)}}
    backend = Tokenizer(models.BPE(vocab, [], unk_token="<unk>", byte_fallback=True))
    backend.decoder = decoders.Sequence([decoders.ByteFallback(), decoders.Fuse()])
    fallback = PreTrainedTokenizerFast(tokenizer_object=backend, unk_token="<unk>")
    ids = fallback.encode("a😀é", add_special_tokens=False)
    assert ids == [1, 3 + 0xF0, 3 + 0x9F, 3 + 0x98, 3 + 0x80, 2]
    texts = TokenTexts(fallback)
    assert [texts.bytes_of(t) for t in ids[1:5]] == [[0xF0], [0x9F], [0x98], [0x80]]
    assert texts.bytes_of(2) == list("é".encode())
    assert TokenOffsets(texts, 0).take(ids) == [0, 1, 1, 1, 1, 2]
    stream = TokenOffsets(texts, 0)  # a stream's chunks, one token each, from where the last one left off
    assert [stream.take([t])[0] for t in ids] == [0, 1, 1, 1, 1, 2]
    lone = [3 + 0xFF, 1]  # a byte that begins no character is its U+FFFD at once, streamed or whole
    assert TokenOffsets(texts, 0).take(lone) == [0, 1]
    stream = TokenOffsets(texts, 0)
    assert [stream.take([t])[0] for t in lone] == [0, 1]


def test_text_decoded_in_one_go_keeps_the_first_spaces_as_streamed(tiny_model, tmp_path):
    """A SentencePiece decoder (Llama 2, Mistral) strips a sequence's first space. Text decoded at the end
    (no stop strings, not streamed) reads after the prompt's last tokens, as the incremental detokenizer's
    does, so `prompt + text` keeps the space between them whether or not a stop string is set, as vLLM's."""
    import shutil

    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    from model_optimizer import LLM

    words = ["▁Hello", "▁and", "▁from", "▁block", "▁a"]
    backend = Tokenizer(models.BPE({"<unk>": 0, "<s>": 1, "</s>": 2, **{w: 3 + i for i, w in enumerate(words)}}, []))
    backend.pre_tokenizer = pre_tokenizers.Metaspace(replacement="▁", prepend_scheme="first")
    backend.decoder = decoders.Sequence([decoders.Replace("▁", " "), decoders.Fuse(), decoders.Strip(" ", 1, 0)])
    sentencepiece = PreTrainedTokenizerFast(
        tokenizer_object=backend, unk_token="<unk>", bos_token="<s>", eos_token="</s>"
    )
    folder = tmp_path / "llama2_style"
    shutil.copytree(tiny_model("qwen3"), folder)
    for name in ("tokenizer.json", "tokenizer_config.json", "chat_template.jinja", "vocab.json", "merges.txt"):
        (folder / name).unlink(missing_ok=True)
    sentencepiece.save_pretrained(str(folder))
    assert sentencepiece.decode([4, 5]) == "and from"  # alone, the first space is gone

    llm = LLM(str(folder), kv_cache_memory=1 << 24)
    greedy = SamplingParams(max_tokens=4, temperature=0, allowed_token_ids=[4, 5, 6, 7])
    hello = {"prompt_token_ids": [3]}  # "▁Hello": this vocabulary has no merges to encode text with
    [whole] = llm.generate([hello], greedy, use_tqdm=False)
    [stopped] = llm.generate([hello], greedy.clone(stop=["@@"]), use_tqdm=False)
    assert whole.outputs[0].token_ids == stopped.outputs[0].token_ids
    assert whole.outputs[0].text == stopped.outputs[0].text
    assert whole.outputs[0].text.startswith(" ")
    assert whole.outputs[0].text == sentencepiece.decode([3, *whole.outputs[0].token_ids])[len("Hello") :]
