"""A prompt too long to fit is refused by its length in characters, before the tokenizer spends seconds on it.

The bound: every character of the text ends up inside some token, and no token covers more characters
than its own vocabulary string is long (byte-level BPE writes one character per byte; SentencePiece
writes a space as "▁" and a fallback byte as "<0xNN>"). So a text of C characters makes at least
C / longest-token tokens. Unicode composition (NFC/NFKC normalizers) can merge up to
MAX_COMPOSED_CHARS code points into one (U+1F82 is 4 under NFD), which divides the bound once more,
unless the text is already in that normal form (most text is NFC; checking takes microseconds per MB).

It holds only for tokenizers that drop no character: a normalizer that strips or a pre-tokenizer that
removes whitespace (BERT's), a fused unknown token, or added tokens that swallow neighbouring spaces
would let a long text make few tokens. For those (and for slow, Python-only tokenizers) there is no
bound and every prompt is tokenized before its length is checked.
"""

from __future__ import annotations

import json
import logging
import math
import unicodedata
from dataclasses import dataclass
from typing import Any

logger = logging.getLogger(__name__)

MAX_COMPOSED_CHARS = 4
"""max(len(unicodedata.normalize("NFD", c))): the most code points canonical composition merges into one."""
COMPOSING = {"NFC", "NFKC"}
KEEPING_NORMALIZERS = {"NFC", "NFKC", "NFD", "NFKD", "Lowercase", "Prepend", "Sequence", "Replace"}
KEEPING_PRE_TOKENIZERS = {"ByteLevel", "Metaspace", "Split", "Digits", "Punctuation", "UnicodeScripts", "Sequence"}


@dataclass(frozen=True)
class TokenBound:
    """The fewest tokens a text can make with one tokenizer, known without running it."""

    longest_token: int
    """Characters in the longest vocabulary string (added tokens included)."""
    normalizer_factor: int
    """How many times shorter the tokenizer's normalizer can make a text (1 without composition)."""
    normal_form: str | None = None
    """When the normalizer is only this composition (NFC or NFKC), a text already in it keeps its length."""

    @property
    def max_chars_per_token(self) -> int:
        """Most characters of input one token can stand for, whatever the text."""
        return self.longest_token * self.normalizer_factor

    def min_tokens(self, text: str) -> int:
        factor = self.normalizer_factor
        if self.normal_form is not None and unicodedata.is_normalized(self.normal_form, text):
            factor = 1
        return math.ceil(len(text) / (self.longest_token * factor))


def token_bound(tokenizer: Any) -> TokenBound | None:
    """The tokenizer's TokenBound, or None when it may drop characters (or its rules cannot be read)."""
    backend = getattr(tokenizer, "backend_tokenizer", None)
    if backend is None:
        return None
    try:
        spec = json.loads(backend.to_str())
        normalizer = spec.get("normalizer")
        factor = _normalizer_factor(normalizer)
        pre_tokenizer = spec.get("pre_tokenizer")
        if (
            factor is None
            or not _keeps_pre_tokens(pre_tokenizer)
            or not _keeps_model(spec.get("model"), _byte_level(pre_tokenizer))
        ):
            return None
        if any(t.get("lstrip") or t.get("rstrip") for t in spec.get("added_tokens") or []):
            return None
        longest = max((len(token) for token in tokenizer.get_vocab()), default=0)
    except Exception as exc:  # noqa: BLE001 - an odd tokenizer only loses the early check
        logger.info("no characters-per-token bound for this tokenizer (%s): prompts are always tokenized", exc)
        return None
    if longest <= 0:
        return None
    only = normalizer.get("type") if normalizer and normalizer.get("type") in COMPOSING else None
    return TokenBound(longest, factor, only)


def _normalizer_factor(spec: dict | None) -> int | None:
    """1 or MAX_COMPOSED_CHARS (how much the normalizer can shorten the text), None if it may drop text."""
    if spec is None:
        return 1
    kind = spec.get("type")
    if kind not in KEEPING_NORMALIZERS:
        return None
    if kind == "Replace":
        pattern = (spec.get("pattern") or {}).get("String")
        return 1 if pattern is not None and len(spec.get("content", "")) >= len(pattern) else None
    if kind == "Sequence":
        factors = [_normalizer_factor(s) for s in spec.get("normalizers", [])]
        return None if None in factors else math.prod(factors)
    return MAX_COMPOSED_CHARS if kind in COMPOSING else 1


def _keeps_pre_tokens(spec: dict | None) -> bool:
    if spec is None:
        return True
    if spec.get("type") not in KEEPING_PRE_TOKENIZERS or spec.get("behavior") == "Removed":
        return False
    return all(_keeps_pre_tokens(s) for s in spec.get("pretokenizers", []))


def _byte_level(spec: dict | None) -> bool:
    if spec is None:
        return False
    return spec.get("type") == "ByteLevel" or any(_byte_level(s) for s in spec.get("pretokenizers", []))


def _keeps_model(spec: dict | None, byte_level: bool) -> bool:
    """Each character lands in some token: byte fallback, or a BPE whose unknown characters become one
    unknown token each (not fused, not silently skipped as a BPE without unk_token does)."""
    spec = spec or {}
    if spec.get("byte_fallback"):
        return True
    return spec.get("type") == "BPE" and not spec.get("fuse_unk") and (byte_level or spec.get("unk_token") is not None)
