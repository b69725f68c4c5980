"""Build prompts of a chosen token length: random token ids, or text.

Text is built with the user's tokenizer when one is given (random ids decoded, re-encoded and
trimmed until the length is exact) and otherwise from common English words, which most
tokenizers encode as about one token each (the server's `usage` then reports the true count).
"""

from __future__ import annotations

import re
from functools import lru_cache
from pathlib import Path

import numpy as np

WORDS = (
    "the of and to in is it you that he was for on are with as his they be at one have this from or had by "
    "word but what some we can out other were all there when up use your how said an each she which do their "
    "time if will way about many then them write would like so these her long make thing see him two has look "
    "more day could go come did number sound no most people my over know water than call first who may down "
    "side been now find any new work part take get place made live where after back little only round man year "
    "came show every good me give our under name very through just form sentence great think say help low line"
).split()

TEXT_ROUNDS = 8
"""Decode, re-encode, trim or pad rounds before text falls back to whole-word tokens."""
WORD_SCAN = 20_000
"""Vocabulary ids scanned for whole-word tokens (a few thousand are found among the first 20,000)."""
WORD_PIECE = re.compile(r"^ [A-Za-z]{2,}$")

TOKEN_ID_OFFSET = 100
"""Random ids start here, away from the special tokens most vocabularies put first."""

SAFE_VOCAB_SIZE = 1000
"""Ids below this exist in every vocabulary a served model plausibly has (32,000 and up for
common LLMs, 8,192 for the built-in model, 1,032 for the test models), so prompts drawn from
[100, 1000) are accepted when nothing tells the vocabulary. What the ids are does not change
the cost of a dense forward pass, and two random 16-token blocks still never collide."""


class PromptMaker:
    """Make prompts of `n` tokens, as id lists or as text.

    Token ids are drawn from [low, high): `vocab_size` when given (capped by the tokenizer's),
    else the tokenizer's vocabulary without its added special tokens, else `SAFE_VOCAB_SIZE`.
    """

    def __init__(self, rng: np.random.Generator, vocab_size: int | None, tokenizer_path: str | None = None) -> None:
        self.rng = rng
        self.tokenizer = load_tokenizer(tokenizer_path) if tokenizer_path else None
        self.num_inexact = 0
        """Text prompts whose token count missed the requested one (a tokenizer that cannot be matched)."""
        self._words: list[int] | None = None
        if self.tokenizer is not None:
            base = self.tokenizer.get_vocab_size(with_added_tokens=False)
            self.vocab_size = base if vocab_size is None else min(vocab_size, base)
            self.vocab_source = f"the tokenizer at {tokenizer_path}"
        elif vocab_size is not None:
            self.vocab_size, self.vocab_source = vocab_size, "--random-vocab-size"
        else:
            self.vocab_size = SAFE_VOCAB_SIZE
            self.vocab_source = "vocabulary unknown: ids every vocabulary has; --tokenizer gives the full range"

    @property
    def id_range(self) -> tuple[int, int]:
        """[low, high) of random token ids: from TOKEN_ID_OFFSET, as --random-vocab-size's help says (it
        must be above it); from 0 only for a tokenizer whose whole vocabulary is smaller."""
        low = TOKEN_ID_OFFSET if self.vocab_size > TOKEN_ID_OFFSET else 0
        return low, self.vocab_size

    def token_ids(self, n: int) -> list[int]:
        """`n` random token ids."""
        low, high = self.id_range
        return self.rng.integers(low, high, size=n).tolist()

    def text(self, n: int) -> tuple[str, int]:
        """Text of about `n` tokens, exactly `n` when a tokenizer is loaded; returns (text, token count).

        Random ids decoded and re-encoded change length (pieces merge across the joins, bytes of a
        character split), so a few rounds trim or pad by token; when they do not settle, the text is
        made of whole-word tokens (" word", which a word-splitting tokenizer never merges with its
        neighbours). A tokenizer for which even that is not exact counts in `num_inexact`."""
        if self.tokenizer is None:
            return " ".join(self.rng.choice(WORDS, size=n).tolist()), n
        ids = self.token_ids(n)
        for _ in range(TEXT_ROUNDS):
            text = self.tokenizer.decode(ids)
            ids = self.tokenizer.encode(text, add_special_tokens=False).ids
            if len(ids) == n:
                return text, n
            ids = ids[:n] if len(ids) > n else ids + self.token_ids(n - len(ids))
        words = self._word_ids()
        if words:
            text = self.tokenizer.decode(self.rng.choice(words, size=n).tolist())
        count = self.count_tokens(text)
        self.num_inexact += count != n
        return text, count

    def _word_ids(self) -> list[int]:
        """Ids of tokens that are one space-led word, and encode back to themselves alone (cached)."""
        if self._words is None:
            self._words = []
            low, high = self.id_range
            for i in range(low, min(high, low + WORD_SCAN)):
                piece = self.tokenizer.decode([i])
                if WORD_PIECE.match(piece) and self.tokenizer.encode(piece, add_special_tokens=False).ids == [i]:
                    self._words.append(i)
        return self._words

    def count_tokens(self, text: str) -> int:
        """Tokens in `text` with the loaded tokenizer, else an estimate (4 characters per token)."""
        if self.tokenizer is None:
            return max(1, round(len(text) / 4))
        return len(self.tokenizer.encode(text, add_special_tokens=False).ids)


@lru_cache(maxsize=4)
def load_tokenizer(path: str):
    """A `tokenizers.Tokenizer` from a folder holding tokenizer.json, or from the file itself (cached:
    each run of a sweep builds its own prompts with it, and it is only read)."""
    from tokenizers import Tokenizer

    file = Path(path)
    if file.is_dir():
        file = file / "tokenizer.json"
    if not file.is_file():
        raise ValueError(f"tokenizer: no tokenizer.json at {path} (give the model or tokenizer folder)")
    try:
        return Tokenizer.from_file(str(file))
    except Exception as exc:  # the library raises its own exception type on bad files
        raise ValueError(f"tokenizer: cannot read {file}: {exc}") from None
