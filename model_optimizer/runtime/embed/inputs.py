"""Turn texts or token-id lists into the token ids the model reads: instruction, end token, length limit.

A text is tokenized with the tokenizer's special tokens ([CLS] ... [SEP] for BERT); decoders get the
end token appended when it is not already last. Token-id lists are taken as they are, and so are a text's
tokens when special tokens are left off (`add_special_tokens=False`, vLLM's field): no [CLS], [SEP] or end
token, as `tokenizer(text, add_special_tokens=False)` gives them.
Too long is an error unless truncation is asked for: `truncate_prompt_tokens` -1 cuts to the
model's limit, k > 0 cuts to k tokens. Texts and token-id lists are cut on one side, the tokenizer's
`truncation_side`: "right" (nearly every tokenizer) keeps the beginning, as sentence-transformers does
and as vLLM does for pooling models (it loads their tokenizers with truncation_side="right"; only
generation keeps a prompt's last tokens); "left" keeps the end. A text keeps its special tokens
([CLS] ... [SEP], the end token) either way; a token-id list is cut as it is.
"""

from __future__ import annotations

import re
import threading
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from numbers import Integral
from typing import Any

from model_optimizer.common.text import not_utf8_at

EmbedInput = str | list[int]

# Whitespace, control characters and Unicode's default-ignorable code points (zero-width spaces and
# joiners, bidi marks, variation selectors, the BOM, ...): characters that show nothing.
_INVISIBLE = (
    "\\s\x00-\x1f\x7f-\x9f\u00ad\u034f\u061c\u115f\u1160\u17b4\u17b5\u180b-\u180f\u200b-\u200f"
    "\u202a-\u202e\u2060-\u206f\u3164\ufe00-\ufe0f\ufeff\uffa0\ufff0-\ufff8"
    "\U0001bca0-\U0001bca3\U0001d173-\U0001d17a\U000e0000-\U000e0fff"
)
_VISIBLE = re.compile(f"[^{_INVISIBLE}]")
BLANK_HINT = "empty or blank (only whitespace or invisible characters such as zero-width spaces)"


class InputError(ValueError):
    """An input that cannot be embedded: "input {index}{detail}". `index` is its position in the caller's
    list, which a caller naming its inputs otherwise (mopt embed: the JSONL row's id) replaces. `param`: the
    request field at fault (the server's error names it): "input", or "truncate_prompt_tokens" for an input
    that cannot be cut to the length asked for."""

    def __init__(self, index: int, detail: str, param: str = "input") -> None:
        super().__init__(f"input {index}{detail}")
        self.index, self.detail, self.param = index, detail, param


def is_blank(text: str) -> bool:
    """True when `text` shows nothing: "", "   ", "\\u200b". Such an input embeds as the model's special
    tokens alone, a vector that stands for no text: the server and `mopt embed` refuse it alike."""
    return _VISIBLE.search(text) is None


@dataclass
class InputRules:
    """What the model folder and EmbedConfig decided about turning inputs into ids."""

    max_seq_length: int
    instruction_template: str
    do_lower_case: bool = False
    end_token_id: int | None = None
    """Appended to each text unless already last; None: nothing appended."""
    vocab_size: int | None = None
    """Token ids given by the caller must be below this."""


INPUTS_HINT = "a string, a list of token ids, or a list of those"


def as_input_list(inputs: EmbedInput | Sequence[EmbedInput]) -> list[EmbedInput]:
    """One text, one token-id list, or a sequence of either -> a list of inputs. Token ids may be any
    integers (NumPy's become ints; a bool is no token id). Bytes are a TypeError, as LLM.generate makes
    them: their byte values would otherwise pass for token ids."""
    if isinstance(inputs, str):
        return [inputs]
    if isinstance(inputs, (bytes, bytearray)) or not isinstance(inputs, Iterable):
        raise TypeError(f"inputs must be {INPUTS_HINT}, got {type(inputs).__name__}")
    items = list(inputs)
    ids = _token_ids(items) if items else None
    if ids is not None:
        return [ids]  # one input given as token ids
    for i, item in enumerate(items):
        if isinstance(item, str):
            continue
        if isinstance(item, (bytes, bytearray)):
            raise TypeError(f"input {i} must be a string or a list of token ids, got {type(item).__name__}")
        ids = _token_ids(item) if isinstance(item, (list, tuple)) else None
        if ids is None:
            raise ValueError(f"input {i} must be a string or a list of token ids, got {type(item).__name__}")
        items[i] = ids
    return items


def _token_ids(values: Sequence) -> Sequence[int] | None:
    """`values` as they are when all are ints (no copy: a request may hold millions), as ints when some are
    other integers (NumPy's), or None when one is no integer (a bool is none)."""
    if all(type(t) is int for t in values):
        return values
    if all(isinstance(t, Integral) and not isinstance(t, bool) for t in values):
        return [int(t) for t in values]
    return None


def check_truncation(truncate_prompt_tokens: int | None, max_seq_length: int) -> int | None:
    """The length to cut inputs to, or None for 'too long is an error'."""
    if truncate_prompt_tokens is None:
        return None
    if isinstance(truncate_prompt_tokens, bool) or not isinstance(truncate_prompt_tokens, int):
        raise ValueError(
            f"truncate_prompt_tokens must be an integer (-1 or 1..{max_seq_length}), got {truncate_prompt_tokens!r}"
        )
    if truncate_prompt_tokens == -1:
        return max_seq_length
    if not 1 <= truncate_prompt_tokens <= max_seq_length:
        raise ValueError(
            f"truncate_prompt_tokens must be -1 or between 1 and the model's limit {max_seq_length}, got {truncate_prompt_tokens}"
        )
    return truncate_prompt_tokens


class InputTokenizer:
    """Token ids for inputs by the model's `InputRules`. Safe to call from several threads at once:
    the Rust tokenizer releases the GIL, so worker threads tokenize in parallel."""

    def __init__(self, tokenizer: Any, rules: InputRules) -> None:
        self.rules = rules
        self.encoder = TextEncoder(tokenizer)
        empty = self.encoder.batch([""])[0]
        self._end_by_tokenizer = rules.end_token_id is not None and empty[-1:] == [rules.end_token_id]
        """The tokenizer's post-processor appends the end token itself (its special tokens include it)."""
        self._empty_text_ids = _with_end(empty, rules.end_token_id)
        self.keeps_end = getattr(tokenizer, "truncation_side", "right") == "left"
        """Truncation keeps an input's last tokens (the tokenizer's truncation_side "left"), else its first."""

    def check(self, inputs: Sequence[EmbedInput], instruction: str | None) -> None:
        """Raise for the first input, in input order, that is bad without tokenizing anything: a token-id
        list that is empty or leaves the vocabulary, an empty text that tokenizes to nothing, or a text (or
        instruction) that is not valid Unicode (a lone surrogate), as the server and `mopt embed` refuse it."""
        if instruction is not None and not_utf8_at(instruction) is not None:
            raise ValueError(f"instruction is not valid Unicode text ({_surrogate_at(instruction)})")
        for i, x in enumerate(inputs):
            if isinstance(x, str):
                if not x and not instruction and not self._empty_text_ids:
                    raise InputError(i, " has no tokens")
                if not_utf8_at(x) is not None:  # the tokenizer would raise a TypeError that names nothing
                    raise InputError(i, f" is not valid Unicode text ({_surrogate_at(x)})")
            else:
                self._check_ids(x, i)

    def token_ids(
        self,
        inputs: Sequence[EmbedInput],
        truncate_to: int | None,
        instruction: str | None,
        numbers: Sequence[int] | None = None,
        add_special_tokens: bool = True,
    ) -> list[list[int]]:
        """Token ids of every input, within the length limit (or an error naming an input over it).
        `numbers` are the inputs' positions in the caller's list, for error messages (default 0, 1, ...).
        `add_special_tokens` False: a text's tokens alone, cut as a token-id list is."""
        numbers = range(len(inputs)) if numbers is None else numbers
        rules = self.rules
        text_rows = [i for i, x in enumerate(inputs) if isinstance(x, str)]
        texts = [_text(inputs[i], rules, instruction) for i in text_rows]  # type: ignore[arg-type]
        encoded = self.encoder.batch(texts, add_special_tokens) if texts else []
        ids: list[list[int]] = [list(x) if not isinstance(x, str) else [] for x in inputs]
        end_token_id = rules.end_token_id if add_special_tokens else None
        for row, tokens in zip(text_rows, encoded):
            ids[row] = _with_end(tokens, end_token_id)
        # texts cut with their special tokens kept; without special tokens a text is cut as its ids
        text_of = dict(zip(text_rows, texts)) if add_special_tokens else {}
        limit = truncate_to or rules.max_seq_length
        for i, tokens in enumerate(ids):
            if isinstance(inputs[i], str):
                if not tokens:
                    raise InputError(numbers[i], " has no tokens")
            else:
                self._check_ids(tokens, numbers[i])
            if len(tokens) <= limit:
                continue
            if truncate_to is None:
                raise InputError(
                    numbers[i],
                    f" has {len(tokens)} tokens, more than the model's limit of {rules.max_seq_length}; "
                    "pass truncate_prompt_tokens=-1 (mopt embed --truncate) to cut it",
                )
            if i not in text_of:
                ids[i] = tokens[-limit:] if self.keeps_end else tokens[:limit]  # the side a text is cut on
                continue
            try:
                ids[i] = _truncate_text(text_of[i], self.encoder, rules, limit, self._end_by_tokenizer)
            except ValueError as exc:
                raise InputError(
                    numbers[i], f" cannot be cut to {limit} tokens: {exc}", "truncate_prompt_tokens"
                ) from None
        return ids

    def _check_ids(self, tokens: Sequence[int], number: int) -> None:
        if not tokens:
            raise InputError(number, " has no tokens")
        vocab_size = self.rules.vocab_size
        if vocab_size is not None and not (min(tokens) >= 0 and max(tokens) < vocab_size):
            raise InputError(number, f" has token ids outside the vocabulary [0, {vocab_size})")


class TextEncoder:
    """texts -> token ids with special tokens, as `tokenizer(texts)["input_ids"]` gives them, safely from
    several threads at once.

    For a fast tokenizer this calls the Rust tokenizer directly and skips character offsets, which
    takes less time than the transformers wrapper (README "Embeddings", "How it runs"). It works
    on a private copy with truncation and padding switched off, since a tokenizer.json may carry
    both (all-MiniLM-L6-v2's pads and cuts every text to 128), which the wrapper turns off per call.
    Truncation goes through the private copy too, so no call changes tokenizer state that other
    threads read (the wrapper switches truncation on and off on its Rust tokenizer per call)."""

    def __init__(self, tokenizer: Any) -> None:
        self.tokenizer = tokenizer
        backend = getattr(tokenizer, "backend_tokenizer", None)
        self._own = None
        if backend is not None and hasattr(backend, "encode_batch_fast"):
            from tokenizers import Tokenizer

            self._own = Tokenizer.from_str(backend.to_str())
            self._own.no_truncation()
            self._own.no_padding()
        self._lock = threading.Lock()  # the wrapper (slow tokenizers) is not known to be thread-safe

    def batch(self, texts: list[str], add_special_tokens: bool = True) -> list[list[int]]:
        if self._own is not None:
            return [e.ids for e in self._own.encode_batch_fast(texts, add_special_tokens=add_special_tokens)]
        with self._lock:
            return [list(t) for t in self.tokenizer(texts, add_special_tokens=add_special_tokens)["input_ids"]]

    def truncated(self, text: str, max_length: int) -> list[int]:
        """The text's ids cut to `max_length` with its special tokens ([CLS] ... [SEP]) kept."""
        if self._own is None:
            with self._lock:
                return list(
                    self.tokenizer(text, add_special_tokens=True, truncation=True, max_length=max_length)["input_ids"]
                )
        num_special = self._own.num_special_tokens_to_add(False)
        if max_length < num_special:
            raise ValueError(f"the tokenizer's special tokens alone take {num_special}")
        encoding = self._own.encode(text, add_special_tokens=False)
        encoding.truncate(max_length - num_special, direction=getattr(self.tokenizer, "truncation_side", "right"))
        return self._own.post_process(encoding).ids


def _surrogate_at(text: str) -> str:
    return f"a lone surrogate such as \\ud800 at character {not_utf8_at(text)}"


def _text(text: str, rules: InputRules, instruction: str | None) -> str:
    if instruction:
        text = rules.instruction_template.format(task=instruction, text=text)
    return text.lower() if rules.do_lower_case else text


def _with_end(tokens: list[int], end_token_id: int | None) -> list[int]:
    if end_token_id is not None and (not tokens or tokens[-1] != end_token_id):
        tokens.append(end_token_id)  # the list is ours: fresh from the tokenizer
    return tokens


def _truncate_text(
    text: str, encoder: TextEncoder, rules: InputRules, limit: int, end_by_tokenizer: bool = False
) -> list[int]:
    """Cut with the tokenizer's rules, so closing special tokens ([SEP]) survive; keep room for the end token,
    unless the tokenizer appends it itself (`end_by_tokenizer`): then its special tokens, which
    `TextEncoder.truncated` keeps room for, already hold it."""
    room = limit - (1 if rules.end_token_id is not None and not end_by_tokenizer else 0)
    if room < 1:
        raise ValueError("the end token alone takes one")
    return _with_end(encoder.truncated(text, room), rules.end_token_id)[:limit]
