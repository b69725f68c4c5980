"""A config-only model folder (dummy weights) plus a byte-level BPE tokenizer of its full vocabulary size.

    python3 benchmarks/bpe_tokenizer_model.py benchmarks/configs/qwen3-0.6b OUT_DIR

Structured outputs need a tokenizer whose tokens spell the text (the word tokenizer of
word_tokenizer_model.py has no `{` or `"`), and the cost of a grammar's token mask grows with the
vocabulary and the shape of its token trie. No real Qwen tokenizer can be fetched on the benchmark
machine, so this builds one of the same kind and size: GPT-2's byte alphabet, then the pieces of the
Python standard library's source (words with their leading space, identifiers, numbers, punctuation
runs, indentation; split as Qwen's pre-tokenizer splits them), most frequent first, each added with
the prefixes that lead to it (every token is a merge of a shorter one and one byte), until the
regular vocabulary holds `vocab_size - 293` tokens; Qwen's three chat special tokens sit at its ids
151643-151645 (the config's EOS among them), the ids above stay unassigned, as in Qwen's own.
"""

from __future__ import annotations

import json
import shutil
import sys
import sysconfig
from collections import Counter
from pathlib import Path

SPECIAL = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
UNASSIGNED = 290
"""Ids past the specials left without a token (Qwen3: 151,669 tokens for 151,936 logits)."""
SPLIT = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
)
CHAT_TEMPLATE = (
    "{% for message in messages %}<|im_start|>{{ message['role'] }}\n{{ message['content'] }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)


def _pieces(limit_bytes: int = 40 << 20) -> Counter:
    """Byte-level pieces of the standard library's source and their counts."""
    from tokenizers import Regex, pre_tokenizers

    split = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Split(Regex(SPLIT), behavior="isolated"),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
        ]
    )
    counts: Counter = Counter()
    read = 0
    for path in sorted(Path(sysconfig.get_paths()["stdlib"]).rglob("*.py")):
        try:
            text = path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError):
            continue
        counts.update(piece for piece, _ in split.pre_tokenize_str(text))
        read += len(text)
        if read > limit_bytes:
            break
    return counts


def vocabulary(num_regular: int) -> tuple[dict[str, int], list[tuple[str, str]]]:
    """(token -> id, merges): the byte alphabet, then frequent pieces with their prefixes."""
    from tokenizers import pre_tokenizers

    vocab = {ch: i for i, ch in enumerate(sorted(pre_tokenizers.ByteLevel.alphabet()))}
    merges: list[tuple[str, str]] = []
    for piece, _ in _pieces().most_common():
        for end in range(2, len(piece) + 1):
            token = piece[:end]
            if token not in vocab:
                vocab[token] = len(vocab)
                merges.append((piece[: end - 1], piece[end - 1]))
                if len(vocab) == num_regular:
                    return vocab, merges
    raise ValueError(f"the standard library gives only {len(vocab)} tokens, fewer than {num_regular}")


def write(src: Path, out: Path) -> None:
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers

    out.mkdir(parents=True, exist_ok=True)
    config = json.loads((src / "config.json").read_text())
    shutil.copy(src / "config.json", out / "config.json")
    num_regular = config["vocab_size"] - UNASSIGNED - len(SPECIAL)
    vocab, merges = vocabulary(num_regular)
    tokenizer = Tokenizer(models.BPE(vocab=vocab, merges=merges))
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    tokenizer.add_special_tokens(SPECIAL)  # ids num_regular .. num_regular + 2
    tokenizer.save(str(out / "tokenizer.json"))
    eos = config.get("eos_token_id")
    eos = eos[0] if isinstance(eos, list) else eos
    eos_token = SPECIAL[eos - num_regular] if eos is not None and 0 <= eos - num_regular < len(SPECIAL) else None
    settings = {"tokenizer_class": "PreTrainedTokenizerFast", "eos_token": eos_token, "pad_token": SPECIAL[0]}
    (out / "tokenizer_config.json").write_text(json.dumps({**settings, "chat_template": CHAT_TEMPLATE}))
    print(f"{out}: config.json and a {len(vocab) + len(SPECIAL)}-token byte-level BPE tokenizer", file=sys.stderr)


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    write(Path(sys.argv[1]), Path(sys.argv[2]))
