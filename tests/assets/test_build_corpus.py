"""scripts/build_corpus.py on a small Sphinx-like HTML tree (real files)."""

from __future__ import annotations

import json
import re

from conftest import TOPICS, load_script


def read(corpus_dir, name):
    return (corpus_dir / name).read_text(encoding="utf-8")


def test_keeps_main_body_text_only(corpus_dir):
    text = read(corpus_dir, "train.txt") + read(corpus_dir, "val.txt")
    assert "module provides functions for working with" in text
    for unwanted in (
        "var navigation",
        "color: red",
        "sidebar text",
        "Copyright footer",
        "next | previous",
        "\u00b6",
        "Table of Contents",
    ):
        assert unwanted not in text


def test_prose_is_reflowed_and_code_keeps_its_lines(corpus_dir):
    text = read(corpus_dir, "train.txt")
    assert "It is part of the standard library and needs no installation." in text
    assert "def main():\n    return" in text


def test_index_and_static_pages_skipped(corpus_dir):
    stats = json.loads(read(corpus_dir, "stats.json"))
    assert stats["num_pages"] == len(TOPICS)


def test_duplicate_paragraphs_dropped_and_val_held_out(corpus_dir):
    train, val = read(corpus_dir, "train.txt"), read(corpus_dir, "val.txt")
    shared = "This shared paragraph is repeated on every page"
    assert (train + val).count(shared) == 1
    stats = json.loads(read(corpus_dir, "stats.json"))
    assert stats["num_val_documents"] == 1 and stats["num_train_documents"] == len(TOPICS) - 1
    val_slug = stats["val_pages"][0].split("/")[-1].removesuffix(".html")
    assert f"The {val_slug.upper()} module" in val and f"The {val_slug.upper()} module" not in train
    assert train.count("<|endoftext|>") == len(TOPICS) - 2


def test_api_entries_become_chats(corpus_dir):
    chats = [json.loads(line) for line in read(corpus_dir, "chat_train.jsonl").splitlines()]
    assert len(chats) == len(TOPICS) - 1
    user, assistant = chats[0]["messages"]
    assert user["role"] == "user" and ".process" in user["content"]
    slug = re.search(r"(\w+)\.process", user["content"]).group(1)
    assert assistant["content"].startswith(f"{slug}.process(data, strict=False)\n\n")
    assert "return a new object with the result of the work." in assistant["content"]


def test_output_is_reproducible(html_dir, corpus_dir, tmp_path):
    rc = load_script("build_corpus").main(
        ["--html-dir", str(html_dir), "--out-dir", str(tmp_path), "--val-fraction", "0.2", "--seed", "0"]
    )
    assert rc == 0
    for name in ("train.txt", "val.txt", "chat_train.jsonl"):
        assert (tmp_path / name).read_bytes() == (corpus_dir / name).read_bytes()


def test_missing_html_dir_is_a_clear_error(tmp_path, capsys):
    rc = load_script("build_corpus").main(["--html-dir", str(tmp_path / "nope"), "--out-dir", str(tmp_path)])
    assert rc == 2
    assert "python3.11-doc" in capsys.readouterr().err
