"""Tokenizing on worker threads, chunk by chunk: the same ids and vectors as one pass on the caller's thread."""

from __future__ import annotations

import pytest
import torch

from model_optimizer.runtime.embed.inputs import TextEncoder
from model_optimizer.runtime.embed.tokenizer_pool import TokenizerPool, plan_chunks
from tests.runtime.embed.texts import varied_texts


def _long_texts() -> list[str]:
    """Texts past all-MiniLM-L6-v2's tokenizer.json truncation (128 tokens) and padding settings."""
    return [" ".join(["embedding"] * n) + " naïve 日本語 😀" for n in (1, 127, 200, 400)]


@pytest.mark.parametrize("which", ["minilm", "qwen3"])
def test_fast_encoder_gives_the_wrappers_ids(which, minilm, qwen3):
    """The direct Rust call equals transformers' tokenizer(texts), special tokens included, nothing cut or padded."""
    tokenizer = (minilm if which == "minilm" else qwen3).tokenizer
    texts = varied_texts(120, seed=3) + _long_texts()
    encoder = TextEncoder(tokenizer)
    assert encoder.batch(texts) == tokenizer(texts, add_special_tokens=True)["input_ids"]
    assert len(encoder.batch(_long_texts())[-1]) > 400
    for text in texts[::7] + _long_texts():  # truncation keeps the special tokens, as the wrapper's does
        for n in (3, 10, 128):
            assert (
                encoder.truncated(text, n)
                == tokenizer(text, add_special_tokens=True, truncation=True, max_length=n)["input_ids"]
            )


def test_chunks_cover_every_input_longest_first():
    items = ["x" * n for n in (5, 300, 40, 0, 120, 7)] + [[1, 2, 3] * 30]
    chunks = plan_chunks(items, chunk_chars=150)
    flat = [i for c in chunks for i in c]
    assert sorted(flat) == list(range(len(items)))
    assert flat[:3] == [6, 1, 4]  # 90 ids count as 360 characters, then 300 and 120 characters
    assert all(len(c) >= 1 for c in chunks) and len(chunks) > 2


@pytest.mark.slow
def test_threaded_chunks_give_the_same_vectors_and_counts(minilm):
    texts = varied_texts(150, seed=5) + [[101, 7592, 102]]
    whole = minilm.encode(texts, truncate_prompt_tokens=-1)
    saved = minilm.tokenizer_pool
    minilm.tokenizer_pool = TokenizerPool(2, chunk_chars=300)
    try:
        assert len(plan_chunks(texts, 300)) > 5
        seen: list[int] = []
        chunked = minilm.encode(texts, truncate_prompt_tokens=-1, on_progress=seen.append)
    finally:
        minilm.tokenizer_pool = saved
    assert chunked.num_tokens == whole.num_tokens
    assert torch.allclose(chunked.embeddings, whole.embeddings, atol=1e-5)
    assert sum(seen) == len(texts)


@pytest.mark.slow
def test_truncation_on_several_threads_at_once(minilm):
    """Many over-long texts cut on worker threads: the same ids and vectors as on one thread."""
    texts = [" ".join(["token"] * (300 + 17 * i)) + f" {i}" for i in range(40)] + varied_texts(40, seed=8)
    one = minilm.encode(texts, truncate_prompt_tokens=-1)
    saved = minilm.tokenizer_pool
    minilm.tokenizer_pool = TokenizerPool(4, chunk_chars=1500)
    try:
        many = minilm.encode(texts, truncate_prompt_tokens=-1)
    finally:
        minilm.tokenizer_pool = saved
    assert many.num_tokens == one.num_tokens and max(many.num_tokens) == 256
    assert torch.allclose(many.embeddings, one.embeddings, atol=1e-5)


def test_an_error_in_a_later_chunk_names_its_input_and_leaves_the_embedder_usable(minilm):
    texts = varied_texts(60, seed=6)
    bad = 41
    texts[bad] = "日" * 300  # over the 256-token limit in few characters, so not in the first chunk ...
    texts[7] = [999_999]  # ... and an id outside the vocabulary, caught before any tokenizing
    assert bad not in plan_chunks(texts, 200)[0]
    saved = minilm.tokenizer_pool
    minilm.tokenizer_pool = TokenizerPool(2, chunk_chars=200)
    try:
        with pytest.raises(ValueError, match=r"input 7 has token ids outside the vocabulary"):
            minilm.encode(texts)
        texts[7] = "fine too"
        with pytest.raises(ValueError, match=rf"input {bad} has \d+ tokens, more than the model's limit"):
            minilm.encode(texts)
        texts[bad] = "fine now"
        assert minilm.encode(texts).embeddings.shape == (60, 384)
    finally:
        minilm.tokenizer_pool = saved


def test_tokenizer_threads_is_checked(minilm_dir):
    from model_optimizer.runtime.embed import Embedder

    with pytest.raises(ValueError, match="tokenizer_threads must be an integer >= 0"):
        Embedder(minilm_dir, device="cpu", tokenizer_threads=-1)
    assert Embedder(minilm_dir, device="cpu", tokenizer_threads=3).tokenizer_pool.num_threads == 3
    assert Embedder(minilm_dir, device="cpu").tokenizer_pool.num_threads == 0  # the CPU model needs the cores


def test_truncation_follows_the_tokenizers_side_and_may_leave_only_special_tokens(minilm_dir):
    from transformers import AutoTokenizer

    left = AutoTokenizer.from_pretrained(str(minilm_dir), truncation_side="left")
    text = "the first words go and the last ones stay"
    want = left(text, truncation=True, max_length=5)["input_ids"]
    assert TextEncoder(left).truncated(text, 5) == want and want[1] != left(text)["input_ids"][1]
    assert TextEncoder(left).truncated(text, 2) == left(text, truncation=True, max_length=2)["input_ids"]  # [CLS] [SEP]
    with pytest.raises(ValueError, match="special tokens alone take 2"):
        TextEncoder(left).truncated(text, 1)


def test_bad_inputs_fail_before_any_batch_runs(minilm):
    """A bad token-id input at the end of a long call is found before the model runs at all."""
    texts = varied_texts(300, seed=9)
    done: list[int] = []
    for bad, message in (
        ([], "input 300 has no tokens"),
        ([5, 10**7], "input 300 has token ids outside the vocabulary"),
    ):
        with pytest.raises(ValueError, match=message):
            minilm.encode(texts + [bad], on_progress=done.append)
    with pytest.raises(ValueError, match="input 1 cannot be cut to 1 tokens"):
        minilm.encode(["ok", "a text of several words"], truncate_prompt_tokens=1)
    assert done == []
