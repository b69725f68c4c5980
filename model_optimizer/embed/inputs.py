"""Turn texts or token-id lists into the token ids the model reads: instruction, end token, length limit.

A text is tokenized with the tokenizer's special tokens ([CLS] ... [SEP] for BERT); decoders get the
end token appended when it is not already last. Token-id lists are taken as they are.
Too long is an error unless truncation is asked for: `truncate_prompt_tokens` -1 cuts to the
model's limit, k > 0 cuts to k tokens. Text keeps its beginning and its closing special tokens.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

EmbedInput = str | list[int]


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


def as_input_list(inputs: EmbedInput | Sequence[EmbedInput]) -> list[EmbedInput]:
    """One text, one token-id list, or a sequence of either -> a list of inputs."""
    if isinstance(inputs, str):
        return [inputs]
    items = list(inputs)
    if items and all(isinstance(t, int) and not isinstance(t, bool) for t in items):
        return [items]  # one input given as token ids
    for i, item in enumerate(items):
        if isinstance(item, str):
            continue
        if not isinstance(item, (list, tuple)) or not all(isinstance(t, int) and not isinstance(t, bool) for t in item):
            raise ValueError(f"input {i} must be a string or a list of token ids, got {type(item).__name__}")
    return items


def check_truncation(truncate_prompt_tokens: int | None, max_seq_length: int) -> int | None:
    """The length to cut inputs to, or None for 'too long is an error'."""
    if truncate_prompt_tokens is None:
        return None
    if isinstance(truncate_prompt_tokens, bool) or not isinstance(truncate_prompt_tokens, int):
        raise ValueError(f"truncate_prompt_tokens must be an integer (-1 or 1..{max_seq_length}), got {truncate_prompt_tokens!r}")
    if truncate_prompt_tokens == -1:
        return max_seq_length
    if not 1 <= truncate_prompt_tokens <= max_seq_length:
        raise ValueError(f"truncate_prompt_tokens must be -1 or between 1 and the model's limit {max_seq_length}, got {truncate_prompt_tokens}")
    return truncate_prompt_tokens


def prepare_token_ids(
    inputs: list[EmbedInput], tokenizer: Any, rules: InputRules, truncate_to: int | None, instruction: str | None
) -> list[list[int]]:
    """Token ids of every input, within the length limit (or an error naming the first one over it)."""
    text_rows = [i for i, x in enumerate(inputs) if isinstance(x, str)]
    texts = [_text(inputs[i], rules, instruction) for i in text_rows]
    encoded = tokenizer(texts, add_special_tokens=True)["input_ids"] if texts else []
    ids: list[list[int]] = [list(x) if not isinstance(x, str) else [] for x in inputs]
    for row, tokens in zip(text_rows, encoded):
        ids[row] = _with_end(list(tokens), rules.end_token_id)
    text_of = dict(zip(text_rows, texts))
    limit = truncate_to or rules.max_seq_length
    for i, tokens in enumerate(ids):
        if not tokens:
            raise ValueError(f"input {i} has no tokens")
        if rules.vocab_size is not None and i not in text_of and not (min(tokens) >= 0 and max(tokens) < rules.vocab_size):
            raise ValueError(f"input {i} has token ids outside the vocabulary [0, {rules.vocab_size})")
        if len(tokens) <= limit:
            continue
        if truncate_to is None:
            raise ValueError(
                f"input {i} has {len(tokens)} tokens, more than the model's limit of {rules.max_seq_length}; "
                "pass truncate_prompt_tokens=-1 (mopt embed --truncate) to cut it"
            )
        ids[i] = _truncate_text(text_of[i], tokenizer, rules, limit) if i in text_of else tokens[:limit]
    return ids


def _text(text: str, rules: InputRules, instruction: str | None) -> str:
    if instruction:
        text = rules.instruction_template.format(task=instruction, text=text)
    return text.lower() if rules.do_lower_case else text


def _with_end(tokens: list[int], end_token_id: int | None) -> list[int]:
    if end_token_id is None or (tokens and tokens[-1] == end_token_id):
        return tokens
    return tokens + [end_token_id]


def _truncate_text(text: str, tokenizer: Any, rules: InputRules, limit: int) -> list[int]:
    """Let the tokenizer cut, so closing special tokens ([SEP]) survive; keep room for the end token."""
    room = limit - (1 if rules.end_token_id is not None else 0)
    if room < 1:
        raise ValueError(f"cannot truncate to {limit} tokens: the end token alone takes one")
    tokens = tokenizer(text, add_special_tokens=True, truncation=True, max_length=room)["input_ids"]
    tokens = _with_end(list(tokens), rules.end_token_id)
    return tokens[:limit]
