"""Train the reference model's byte-level BPE tokenizer and pre-tokenize the corpus.

Reads the corpus that ``scripts/build_corpus.py`` wrote, trains a byte-level BPE
(HF ``tokenizers``) with the special tokens ``<|endoftext|>``, ``<|im_start|>`` and
``<|im_end|>``, and saves it as a transformers ``PreTrainedTokenizerFast`` with a
ChatML chat template, so ``AutoTokenizer.from_pretrained(folder)`` works. Then it
encodes the corpus into flat ``uint16`` token files for training, so the GPU machine
does no tokenizer work:

* ``tokens/train.bin``: training documents, each followed by ``<|endoftext|>``, with
  the API question/answer chats (rendered with the chat template) mixed in;
* ``tokens/val.bin``: validation documents only (what perplexity is measured on);
* ``tokens/val_chat.bin``: validation chats;
* ``tokens/meta.json``: counts and the ids of the special tokens.

Run::

    python scripts/train_tokenizer.py            # .data/corpus -> .data/tokenizer, .data/tokens
"""

from __future__ import annotations

import argparse
import json
import os
import random
import sys
from pathlib import Path

import numpy as np

SPECIAL_TOKENS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
DOC_SEPARATOR = "<|endoftext|>"

# Pieces before byte-level BPE: English contractions, words with one leading space,
# single digits (so numbers tokenize uniformly), punctuation runs, newlines, and
# whitespace runs that keep the last space for the next word (code indentation).
PRETOKENIZE_PATTERN = (
    r"'(?:[sdmt]|ll|ve|re)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*"
    r"|\s*[\r\n]+|\s+(?!\S)|\s+"
)

# ChatML, as Qwen models use it: every message framed by <|im_start|>role ... <|im_end|>.
# Content may be a string or a list of {"type": "text", "text": ...} parts.
CHAT_TEMPLATE = (
    "{%- for message in messages -%}"
    "{{- '<|im_start|>' + message['role'] + '\\n' -}}"
    "{%- if message['content'] is string -%}{{- message['content'] -}}"
    "{%- else -%}{{- message['content'] | selectattr('type', 'equalto', 'text') | map(attribute='text')"
    " | join('\\n') -}}{%- endif -%}"
    "{{- '<|im_end|>\\n' -}}"
    "{%- endfor -%}"
    "{%- if add_generation_prompt -%}{{- '<|im_start|>assistant\\n' -}}{%- endif -%}"
)


def read_documents(path: Path) -> list[str]:
    """Splits a corpus file into documents at the separator lines."""
    if not path.is_file():
        raise ValueError(f"{path} not found; run scripts/build_corpus.py first")
    text = path.read_text(encoding="utf-8")
    docs = [d.strip("\n") for d in text.split(f"\n{DOC_SEPARATOR}\n")]
    return [d for d in docs if d.strip()]


def read_chats(path: Path) -> list[list[dict[str, str]]]:
    """Reads the ``{"messages": [...]}`` lines of a chat file (missing file: none)."""
    if not path.is_file():
        return []
    with path.open(encoding="utf-8") as f:
        return [json.loads(line)["messages"] for line in f if line.strip()]


def train_bpe(documents: list[str], vocab_size: int):
    """Trains the byte-level BPE model; returns a ``tokenizers.Tokenizer``."""
    from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers, trainers

    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Split(Regex(PRETOKENIZE_PATTERN), behavior="isolated"),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
        ]
    )
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        min_frequency=2,
        special_tokens=SPECIAL_TOKENS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=True,
    )
    tokenizer.train_from_iterator(documents, trainer=trainer, length=len(documents))
    return tokenizer


def save_hf_tokenizer(tokenizer, out_dir: Path, max_length: int):
    """Wraps the tokenizer for transformers and saves it; returns the wrapper."""
    from transformers import PreTrainedTokenizerFast

    hf = PreTrainedTokenizerFast(
        tokenizer_object=tokenizer,
        bos_token=None,
        eos_token="<|im_end|>",
        pad_token="<|endoftext|>",
        unk_token=None,
        additional_special_tokens=["<|im_start|>"],
        model_max_length=max_length,
        clean_up_tokenization_spaces=False,
    )
    hf.chat_template = CHAT_TEMPLATE
    out_dir.mkdir(parents=True, exist_ok=True)
    hf.save_pretrained(str(out_dir))
    finish_tokenizer_config(out_dir)
    return hf


def finish_tokenizer_config(out_dir: Path) -> None:
    """Keeps the chat template inside ``tokenizer_config.json`` (not a separate .jinja file)
    and names the generic fast-tokenizer class, which transformers 4.x and 5.x both load."""
    config_path = out_dir / "tokenizer_config.json"
    config = json.loads(config_path.read_text(encoding="utf-8"))
    config["chat_template"] = CHAT_TEMPLATE
    config["tokenizer_class"] = "PreTrainedTokenizerFast"
    jinja = out_dir / "chat_template.jinja"
    if jinja.exists():
        jinja.unlink()
    write_atomic(config_path, (json.dumps(config, indent=2, ensure_ascii=False) + "\n").encode())


def write_atomic(path: Path, data: bytes) -> None:
    """Writes bytes through a temporary file in the same folder and a rename."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_bytes(data)
    os.replace(tmp, path)


def encode_stream(tokenizer, texts: list[str], end_id: int | None) -> np.ndarray:
    """Encodes texts (special tokens recognised) into one uint16 array, ``end_id`` after each."""
    ids: list[int] = []
    for encoding in tokenizer.encode_batch(texts, add_special_tokens=False):
        ids.extend(encoding.ids)
        if end_id is not None:
            ids.append(end_id)
    array = np.asarray(ids, dtype=np.int64)
    if array.size and array.max() >= 2**16:
        raise ValueError("token id does not fit in uint16; use a vocabulary below 65536")
    return array.astype(np.uint16)


def pretokenize(tokenizer, hf, corpus_dir: Path, out_dir: Path, seed: int) -> dict:
    """Writes train.bin / val.bin / val_chat.bin and meta.json; returns the metadata."""
    eot = tokenizer.token_to_id("<|endoftext|>")
    train_docs = read_documents(corpus_dir / "train.txt")
    render = lambda messages: hf.apply_chat_template(messages, tokenize=False)  # noqa: E731
    train_chats = [render(m) for m in read_chats(corpus_dir / "chat_train.jsonl")]
    val_chats = [render(m) for m in read_chats(corpus_dir / "chat_val.jsonl")]
    # Chats are sequences of their own, ended by <|endoftext|> like documents.
    mixed = train_docs + train_chats
    random.Random(seed).shuffle(mixed)
    arrays = {
        "train": encode_stream(tokenizer, mixed, eot),
        "val": encode_stream(tokenizer, read_documents(corpus_dir / "val.txt"), eot),
        "val_chat": encode_stream(tokenizer, val_chats, eot),
    }
    for name, array in arrays.items():
        write_atomic(out_dir / f"{name}.bin", array.tobytes())
    meta = {
        "dtype": "uint16",
        "vocab_size": tokenizer.get_vocab_size(),
        "special_token_ids": {t: tokenizer.token_to_id(t) for t in SPECIAL_TOKENS},
        "num_tokens": {name: int(a.size) for name, a in arrays.items()},
        "num_train_documents": len(train_docs),
        "num_train_chats": len(train_chats),
        "seed": seed,
    }
    write_atomic(out_dir / "meta.json", (json.dumps(meta, indent=2) + "\n").encode())
    return meta


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--corpus-dir", type=Path, default=Path(".data/corpus"))
    parser.add_argument("--tokenizer-dir", type=Path, default=Path(".data/tokenizer"))
    parser.add_argument("--tokens-dir", type=Path, default=Path(".data/tokens"))
    parser.add_argument("--vocab-size", type=int, default=8192)
    parser.add_argument("--max-length", type=int, default=2048, help="model_max_length")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    if not 256 + len(SPECIAL_TOKENS) < args.vocab_size <= 65536:
        print("error: --vocab-size must be between 260 and 65536", file=sys.stderr)
        return 2
    try:
        train_docs = read_documents(args.corpus_dir / "train.txt")
        tokenizer = train_bpe(train_docs, args.vocab_size)
        hf = save_hf_tokenizer(tokenizer, args.tokenizer_dir, args.max_length)
        meta = pretokenize(tokenizer, hf, args.corpus_dir, args.tokens_dir, args.seed)
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(json.dumps(meta, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
