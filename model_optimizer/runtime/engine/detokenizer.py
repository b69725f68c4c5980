"""IncrementalDetokenizer: one completion's token ids to text as they arrive, stop strings found in it;
TokenTexts: the text of single tokens, as logprobs name them.

Used by the output processor, after the core loop; the core itself only sees token ids."""

from __future__ import annotations

import codecs
import re
import weakref
from itertools import accumulate
from typing import Any

from model_optimizer.runtime.engine.input_processor import Tokenizer
from model_optimizer.runtime.sampling_params import SamplingParams

REPLACEMENT_CHAR = "\ufffd"
DETOKENIZE_WINDOW = 6


class IncrementalDetokenizer:
    """Turns one completion's token ids into text as they arrive.

    Decodes a short window of tokens before the new ones and keeps only the text past that
    window, so each step costs the same however long the sequence; text ending in a partial
    UTF-8 character is held back until the character completes. Stop strings are searched
    in the new text (plus an overlap, since a stop string can span tokens), cut from the
    output, and text that might be the start of a stop string is held back until it is not.
    """

    def __init__(self, tokenizer: Tokenizer, prompt_token_ids: list[int], params: SamplingParams) -> None:
        self.tokenizer = tokenizer
        self.params = params
        self.token_ids = prompt_context(tokenizer, prompt_token_ids, params.skip_special_tokens)
        self.prefix_offset = 0
        self.read_offset = len(self.token_ids)
        self.text = ""
        self.num_tokens = 0
        self.num_checked_chars = 0
        """Text already searched for stop strings (or exempt from it, min_tokens' own): a stop string is
        looked for only where it ends past this, as vLLM looks for it only in each step's new text."""
        self.max_stop_len = max((len(s) for s in params.stop), default=0)

    def add_token(self, token_id: int) -> str | None:
        """Append one token; return the matched stop string if it ends the completion."""
        self.token_ids.append(token_id)
        self.num_tokens += 1
        prefix, full = self._decode_window()
        if len(full) > len(prefix) and not full.endswith(REPLACEMENT_CHAR):
            self.text += full[len(prefix) :]
            self.prefix_offset = self.read_offset
            self.read_offset = len(self.token_ids)
            self._trim_window()
        return self._find_stop()

    def visible_text(self, finished: bool) -> str:
        """Text safe to show: all of it once finished, else without a possible stop-string start."""
        if finished or not self.max_stop_len:
            return self.text
        return self.text[: max(len(self.text) - self.max_stop_len + 1, 0)]

    def flush(self) -> str | None:
        """At finish, add whatever is still held back as an incomplete character; return the stop string
        found in it, cut like any other (the text ends there, so it is the completion's stop)."""
        if self.read_offset < len(self.token_ids):
            prefix, full = self._decode_window()
            self.text += full[len(prefix) :]
            self.read_offset = len(self.token_ids)
        return self._find_stop()

    def _decode_window(self) -> tuple[str, str]:
        """The window's text before the tokens not yet read, and with them."""
        skip, window = self.params.skip_special_tokens, self.token_ids[self.prefix_offset :]
        prefix = self.tokenizer.decode(window[: self.read_offset - self.prefix_offset], skip_special_tokens=skip)
        return prefix, self.tokenizer.decode(window, skip_special_tokens=skip)

    def _find_stop(self) -> str | None:
        """The earliest stop string that ends in the text not searched yet, cut from the text; None if none."""
        checked, self.num_checked_chars = self.num_checked_chars, len(self.text)
        if not self.params.stop or self.num_tokens <= self.params.min_tokens or len(self.text) == checked:
            return None
        best: tuple[int, str] | None = None
        for stop in self.params.stop:
            at = self.text.find(stop, max(checked - len(stop) + 1, 0))
            if at != -1 and (best is None or at < best[0]):
                best = (at, stop)
        if best is None:
            return None
        at, stop = best
        self.text = self.text[: at + len(stop)] if self.params.include_stop_str_in_output else self.text[:at]
        return stop

    def _trim_window(self) -> None:
        """Keep only the tokens the next decode needs, so memory stays flat."""
        drop = max(self.prefix_offset - DETOKENIZE_WINDOW, 0)
        if drop:
            del self.token_ids[:drop]
            self.prefix_offset -= drop
            self.read_offset -= drop


def prompt_context(tokenizer: Tokenizer, prompt_token_ids: list[int], skip_special_tokens: bool) -> list[int]:
    """The prompt's last tokens that a completion's text is decoded after, so that it reads as the slice of
    the whole decode past the prompt's text (vLLM's rule): DETOKENIZE_WINDOW of them, more (doubling) while
    they decode to nothing (special tokens skipped: a decoder that treats a sequence's first token apart,
    WordPiece or SentencePiece, would drop the completion's first space), and up to 3 more while they start
    inside a character (one the prompt ends in and the completion completes would read as U+FFFD; a
    character is at most 4 bytes, so its first byte is at most 3 tokens back)."""
    size, num_prompt = DETOKENIZE_WINDOW, len(prompt_token_ids)

    def text(size: int) -> str:
        return tokenizer.decode(prompt_token_ids[-size:], skip_special_tokens=skip_special_tokens)

    while size < num_prompt and not text(size):
        size *= 2
    for _ in range(3):
        if size >= num_prompt or not text(size).startswith(REPLACEMENT_CHAR):
            break
        size += 1
    return list(prompt_token_ids[-size:])


def decoded_after(tokenizer: Tokenizer, context: list[int], token_ids: list[int], skip_special_tokens: bool) -> str:
    """The text of `token_ids` as it reads after `context` (the prompt's last tokens), in one go: what
    IncrementalDetokenizer gives token by token. Decoded alone, a first token's leading space is lost
    where the tokenizer's decoder strips a sequence's first space (SentencePiece's Llama 2, Mistral)."""
    if not context:
        return tokenizer.decode(token_ids, skip_special_tokens=skip_special_tokens)
    prefix = tokenizer.decode(context, skip_special_tokens=skip_special_tokens)
    return tokenizer.decode(context + token_ids, skip_special_tokens=skip_special_tokens)[len(prefix) :]


def _byte_level_alphabet() -> dict[str, int]:
    """Byte-level BPE's alphabet (GPT-2, Llama 3, Qwen): the character each byte is written as in the
    vocabulary. Printable Latin-1 bytes stand for themselves; the others, in order, take U+0100 on."""
    printable = [*range(0x21, 0x7F), *range(0xA1, 0xAD), *range(0xAE, 0x100)]
    alphabet = {chr(b): b for b in printable}
    others = (b for b in range(256) if b not in alphabet.values())
    alphabet.update((chr(0x100 + i), b) for i, b in enumerate(others))
    return alphabet


_BYTE_LEVEL = _byte_level_alphabet()
_BYTE_PIECE = re.compile(r"<0x([0-9A-Fa-f]{2})>")
"""SentencePiece's byte-fallback pieces (Llama 2, Mistral, Gemma): one byte each."""


def token_bytes(tokenizer: Any, token_id: int, text: str) -> bytes:
    """The bytes a token stands for. A token that holds part of a character decodes alone to U+FFFD,
    whose UTF-8 is not its bytes: those are read from its vocabulary piece (a byte-fallback piece, or
    a byte-level one), so that the bytes of consecutive tokens join into their text, as OpenAI's
    logprobs `bytes` promise. Any other token's bytes are its text's."""
    if REPLACEMENT_CHAR not in text:
        return text.encode()
    piece = tokenizer.convert_ids_to_tokens(token_id)
    if isinstance(piece, str) and piece:
        if match := _BYTE_PIECE.fullmatch(piece):
            return bytes([int(match.group(1), 16)])
        if all(c in _BYTE_LEVEL for c in piece):
            return bytes(_BYTE_LEVEL[c] for c in piece)
    return text.encode()


_SHARED: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
"""Per tokenizer: its caches (see TokenTexts), shared by every request (a token's text never changes)."""
_NO_TOKENIZER: dict[str, dict] = {"keys": {}}
"""The caches of a model without a tokenizer: only the "token_id:N" keys."""
_AS_IDS: dict[str, dict] = {}
"""The caches of "token_id:N" names (TokenTexts(as_ids=True)): the same for every tokenizer."""


class TokenTexts:
    """Text of single tokens, cached (logprobs name each token by its text); None without a tokenizer.

    A token's text is its id decoded alone, special tokens kept whatever the request's skip_special_tokens:
    vLLM's rule for decoded_token, and the one rule for the server's logprobs and the offline API's
    (sampler_output.TokenText).

    Logprobs name 1 + top-k tokens per generated token, in every chunk of every stream that asks for
    them, so the texts (and their keys and bytes) are cached for the tokenizer's lifetime, across requests."""

    def __init__(self, tokenizer: Any, as_ids: bool = False) -> None:
        """`as_ids`: name every token "token_id:N" (vLLM's return_tokens_as_token_ids), its bytes those of
        that name, whatever the tokenizer; `text` and `offsets` still read the tokens' texts."""
        self.tokenizer = tokenizer
        self.text: TokenTexts = TokenTexts(tokenizer) if as_ids else self
        """The same tokenizer's tokens named by their text: where a token's text is meant whatever the
        names (prompt_logprobs' decoded_token, logprobs' text_offset into the completion's text)."""
        self.named = tokenizer is not None or as_ids
        """Whether tokens have names (texts, or "token_id:N"); without, logprobs' tokens are null."""
        caches: dict[str, dict] = {}
        if as_ids:
            caches = _AS_IDS
        elif tokenizer is None:
            caches = _NO_TOKENIZER
        else:
            try:
                caches = _SHARED.setdefault(tokenizer, {})
            except TypeError:  # a tokenizer that takes no weak reference: caches of this request's own
                pass
        self.caches = caches
        """Name -> a cache this tokenizer's requests share."""
        self.cache: dict[int, str] = caches.setdefault("texts", {})
        self.key_cache: dict[int, str] = self.cache if tokenizer is not None or as_ids else caches["keys"]
        """Token id -> its top_logprobs key (see key): its text, so the text cache itself with a tokenizer."""
        self.bytes_cache: dict[int, list[int]] = caches.setdefault("bytes", {})
        """Token id -> its bytes as ints (chat logprobs' `bytes`; token_bytes); shared: never change one."""

    def __call__(self, token_id: int) -> str | None:
        text = self.cache.get(token_id)
        if text is None:
            if self.caches is _AS_IDS:
                text = self.cache[token_id] = f"token_id:{token_id}"
            elif self.tokenizer is None:
                return None
            else:
                text = self.cache[token_id] = self.tokenizer.decode([token_id], skip_special_tokens=False)
        return text

    def key(self, token_id: int) -> str:
        """A top_logprobs key: the token's text, or "token_id:N" (vLLM's spelling) when there is no tokenizer."""
        key = self.key_cache.get(token_id)
        if key is None:
            text = self(token_id)
            key = self.key_cache[token_id] = f"token_id:{token_id}" if text is None else text
        return key

    def bytes_of(self, token_id: int) -> list[int]:
        data = self.bytes_cache.get(token_id)
        if data is None:
            text = self(token_id)
            if self.caches is _AS_IDS:
                raw = text.encode()  # type: ignore[union-attr]
            else:
                raw = b"" if text is None else token_bytes(self.tokenizer, token_id, text)
            data = self.bytes_cache[token_id] = list(raw)
        return data

    def many(self, token_ids: list[int]) -> list[str | None]:
        """The names of these tokens (all None without a tokenizer, unless named by id), in one look-up."""
        if not self.named:
            return [None] * len(token_ids)
        cache = self.cache
        try:
            return [cache[t] for t in token_ids]
        except KeyError:  # some are new: decoded once, then every request finds them
            return [self(t) for t in token_ids]


class TokenOffsets:
    """Where each token of a completion starts in the completion's text (logprobs' text_offset), from `start`,
    the tokens given whole or a stream's chunk at a time: the same offsets either way. A token whose text
    holds no U+FFFD adds its length; the bytes of one that does (part of a character, or bytes that make
    none) go through a UTF-8 decoder, as do the tokens after it while the decoder holds part of a
    character: tokens that hold parts of a character start where that character does, as a stream sends it
    (held back until it is whole), and a byte that can begin no character counts as its U+FFFD at once."""

    def __init__(self, texts: TokenTexts, start: int) -> None:
        self.texts = texts.text  # offsets into the completion's text, whatever the tokens' names
        self.at = start
        self.decoder = codecs.getincrementaldecoder("utf-8")("replace")
        self.pending = False
        """The decoder holds the first bytes of a character."""

    def take(self, token_ids: list[int]) -> list[int]:
        """The offsets of the next tokens."""
        texts = self.texts
        if texts.tokenizer is None:
            return [self.at] * len(token_ids)
        names: list[str] = texts.many(token_ids)  # type: ignore[assignment]
        if not self.pending and REPLACEMENT_CHAR not in "".join(names):
            out = list(accumulate(map(len, names), initial=self.at))
            self.at = out.pop()
            return out
        out = []
        for token_id, name in zip(token_ids, names):
            out.append(self.at)
            if self.pending or REPLACEMENT_CHAR in name:
                self.at += len(self.decoder.decode(bytes(texts.bytes_of(token_id))))
                self.pending = bool(self.decoder.getstate()[0])
            else:
                self.at += len(name)
        return out
