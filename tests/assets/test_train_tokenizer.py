"""scripts/train_tokenizer.py: a real (small) BPE, loadable by transformers, and token files."""

from __future__ import annotations

import json

import numpy as np
from conftest import load_script
from transformers import AutoTokenizer


def test_tokenizer_loads_with_chat_template(tokenized):
    tok = AutoTokenizer.from_pretrained(str(tokenized["tokenizer"]))
    assert tok.eos_token == "<|im_end|>" and tok.pad_token == "<|endoftext|>"
    rendered = tok.apply_chat_template([{"role": "user", "content": "Hi?"}], tokenize=False, add_generation_prompt=True)
    assert rendered == "<|im_start|>user\nHi?<|im_end|>\n<|im_start|>assistant\n"
    ids = tok(rendered).input_ids
    assert ids[0] == tok.convert_tokens_to_ids("<|im_start|>")
    assert tok.convert_tokens_to_ids("<|im_end|>") in ids
    config = json.loads((tokenized["tokenizer"] / "tokenizer_config.json").read_text())
    assert "<|im_start|>" in config["chat_template"]


def test_round_trips_text_it_never_saw(tokenized):
    tok = AutoTokenizer.from_pretrained(str(tokenized["tokenizer"]))
    text = "    def f(x):\n\treturn x ** 2  # zoë, 日本, 3.14e-5 \U0001f600\n"
    assert tok.decode(tok(text).input_ids) == text


def test_token_files_hold_documents_and_chats(tokenized, corpus_dir):
    meta = json.loads((tokenized["tokens"] / "meta.json").read_text())
    eot = meta["special_token_ids"]["<|endoftext|>"]
    im_start = meta["special_token_ids"]["<|im_start|>"]
    train = np.fromfile(tokenized["tokens"] / "train.bin", dtype=np.uint16)
    val = np.fromfile(tokenized["tokens"] / "val.bin", dtype=np.uint16)
    assert train.size == meta["num_tokens"]["train"] and val.size == meta["num_tokens"]["val"]
    assert int((train == eot).sum()) == meta["num_train_documents"] + meta["num_train_chats"]
    assert int((train == im_start).sum()) == 2 * meta["num_train_chats"]
    assert int((val == im_start).sum()) == 0 and val[-1] == eot
    tok = AutoTokenizer.from_pretrained(str(tokenized["tokenizer"]))
    first_val_doc = tok.decode(val[: list(val).index(eot)].tolist())
    assert first_val_doc == (corpus_dir / "val.txt").read_text().split("\n<|endoftext|>\n")[0].strip("\n")


def test_bad_vocab_size_is_a_clear_error(capsys):
    assert load_script("train_tokenizer").main(["--vocab-size", "100"]) == 2
    assert "--vocab-size" in capsys.readouterr().err


def test_missing_corpus_is_a_clear_error(tmp_path, capsys):
    assert load_script("train_tokenizer").main(["--corpus-dir", str(tmp_path)]) == 2
    assert "build_corpus.py" in capsys.readouterr().err
