"""Prompts too long to fit are refused before tokenizing (server/token_bound.py), and the bound on tokens
per character never undercounts."""

from __future__ import annotations

import threading

import httpx

from model_optimizer.runtime.server.config import ServerConfig
from tests.runtime.server.live import start_server
from tests.runtime.server.test_errors import assert_error


class CountingTokenizer:
    def __init__(self, tokenizer) -> None:
        self.tokenizer = tokenizer
        self.num_encodes = 0

    def __getattr__(self, name):
        return getattr(self.tokenizer, name)

    def encode(self, text, **kwargs):
        self.num_encodes += 1
        return self.tokenizer.encode(text, **kwargs)


def test_prompt_too_long_to_fit_is_refused_without_tokenizing(own_llm, swapped_tokenizer):
    from model_optimizer.runtime.server.token_bound import token_bound

    counting = swapped_tokenizer(CountingTokenizer)
    live = start_server(own_llm, ServerConfig(max_body_bytes=8 << 20))
    try:
        bound = token_bound(counting.tokenizer).max_chars_per_token
        assert bound >= max(len(t) for t in counting.tokenizer.get_vocab())
        huge = "x" * (128 * bound + 1)  # cannot be fewer than 129 tokens; max_model_len is 128
        errors: list[dict] = []

        def post() -> None:
            errors.append(httpx.post(live.url + "/v1/completions", json={"prompt": huge, "max_tokens": 1}, timeout=60))

        threads = [threading.Thread(target=post) for _ in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        for r in errors:
            assert_error(r, 400, "max_model_len", "128")
        chat = httpx.post(
            live.url + "/v1/chat/completions",
            timeout=60,
            json={"messages": [{"role": "user", "content": huge}], "max_tokens": 1},
        )
        assert_error(chat, 400, "max_model_len")
        assert counting.num_encodes == 0
        ok = httpx.post(live.url + "/v1/completions", json={"prompt": "short", "max_tokens": 1}, timeout=60)
        assert ok.status_code == 200 and counting.num_encodes == 1
    finally:
        live.stop()


def test_bound_is_never_below_the_real_count(server_llm):
    """Texts that pack the most characters into each token still fit the bound."""
    from model_optimizer.runtime.server.token_bound import token_bound

    tokenizer = server_llm.tokenizer
    bound = token_bound(tokenizer)
    longest = max(tokenizer.get_vocab(), key=len)
    for text in (tokenizer.convert_tokens_to_string([longest]) * 50, " " * 5000, "\n" * 3000, "é" * 4000):
        assert len(tokenizer.encode(text, add_special_tokens=False)) >= bound.min_tokens(text)


def nfc_tokenizer(normalizer, pre_tokenizer):
    """A real byte-level BPE tokenizer (trained on a few lines) with the given normalizer."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    backend = Tokenizer(models.BPE())
    backend.normalizer = normalizer
    backend.pre_tokenizer = pre_tokenizer
    backend.decoder = decoders.ByteLevel()
    text = ["ἂν ὦ ᾯ café naïve ệ", "the quick brown fox " * 20, "    indented\n" * 10]
    trainer = trainers.BpeTrainer(vocab_size=400, initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    backend.train_from_iterator(text, trainer)
    return PreTrainedTokenizerFast(tokenizer_object=backend)


def test_bound_under_unicode_composition():
    """NFC can merge 4 code points into one: decomposed text gets the 4x slack, NFC text needs none."""
    import unicodedata

    from tokenizers import normalizers, pre_tokenizers

    from model_optimizer.runtime.server.token_bound import token_bound

    tokenizer = nfc_tokenizer(normalizers.NFC(), pre_tokenizers.ByteLevel(add_prefix_space=False))
    bound = token_bound(tokenizer)
    assert bound.normal_form == "NFC" and bound.max_chars_per_token == 4 * bound.longest_token
    composed = "ᾯ" * 600
    decomposed = unicodedata.normalize("NFD", composed)  # 4 code points per character
    assert len(decomposed) == 4 * len(composed)
    for text in (composed, decomposed, "café " * 300, unicodedata.normalize("NFD", "ệ naïve ") * 200):
        assert len(tokenizer.encode(text, add_special_tokens=False)) >= bound.min_tokens(text)
    assert bound.min_tokens(composed) == -(-len(composed) // bound.longest_token)  # NFC already: no slack


def test_no_bound_when_the_tokenizer_can_drop_characters():
    from tokenizers import normalizers, pre_tokenizers

    from model_optimizer.runtime.server.token_bound import token_bound

    whitespace = nfc_tokenizer(None, pre_tokenizers.Whitespace())  # drops every space
    assert len(whitespace.encode("a" + " " * 5000 + "b", add_special_tokens=False)) < 5
    assert token_bound(whitespace) is None
    assert token_bound(nfc_tokenizer(normalizers.Strip(), pre_tokenizers.ByteLevel())) is None
