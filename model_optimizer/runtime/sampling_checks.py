"""The value checks behind SamplingParams, and the token-id rules the server also applies before it builds one.

SamplingParams first makes its values plain Python (`plain`: NumPy's scalars and arrays, tuples and sets
as int, float, bool and list), then checks them field by field (`check_sampling` ... `check_lengths_and_stops`,
in this order), so that a wrong type (a JSON "hot" or true) is a ValueError naming the allowed values, never
a TypeError. Those checks take the SamplingParams typed Any: sampling_params imports this module, not the
other way round. `unsatisfiable_rules` and `outside_vocab` are the two checks the server also makes of a
request's token ids before it is queued.
"""

from __future__ import annotations

import enum
import math
import numbers
from collections.abc import Iterable
from typing import Any


def require(condition: bool, message: str) -> None:
    """ValueError(message) unless `condition` holds."""
    if not condition:
        raise ValueError(message)


def is_int(value: object) -> bool:
    """An integer that is not a bool (JSON true is not 1 here)."""
    return isinstance(value, int) and not isinstance(value, bool)


def is_finite(value: object) -> bool:
    """A real number (int or float, not bool) that is neither infinite nor NaN."""
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def _in_range(value: object, low: float, high: float) -> bool:
    """A real number (int or float, not bool) in [low, high]; NaN is not."""
    return isinstance(value, (int, float)) and not isinstance(value, bool) and low <= value <= high


def _is_token_ids(value: object) -> bool:
    """A list of token ids: integers >= 0 (an empty list too)."""
    return isinstance(value, list) and all(is_int(t) and t >= 0 for t in value)


def _is_token_id_lists(value: object) -> bool:
    """A list of non-empty lists of token ids (bad words, other ends of a thinking block)."""
    return isinstance(value, list) and all(seq and _is_token_ids(seq) for seq in value)


def plain(value: Any) -> Any:
    """`value` with NumPy's (or torch's) scalars and arrays, other Integral and Real numbers, tuples, sets and
    the keys and values of dicts made Python's int, float, bool, list and dict, all the way down; the same
    object when nothing changes."""
    kind = type(value)
    if value is None or kind in (bool, int, float, str):
        return value
    if kind is list or kind is tuple:
        items = [plain(v) for v in value]
        if kind is list and all(a is b for a, b in zip(items, value, strict=True)):
            return value
        return items
    if isinstance(value, dict):
        return {plain(k): plain(v) for k, v in value.items()}
    if isinstance(value, (str, bytes, enum.Enum)):
        return value
    tolist = getattr(value, "tolist", None)  # numpy's generic and ndarray, torch's Tensor
    if callable(tolist):
        converted = tolist()
        return plain(converted) if isinstance(converted, (list, tuple, dict)) else converted
    if isinstance(value, (list, tuple)):  # a subclass (a namedtuple, ...)
        return [plain(v) for v in value]
    if isinstance(value, (set, frozenset)):  # ids given as a set ({eos, eot}): a list, in order when it has one
        items = [plain(v) for v in value]
        kinds = {type(v) for v in items}  # ints or strings in order: the same list in every process
        return sorted(items) if kinds == {int} or kinds == {str} else items
    if isinstance(value, numbers.Integral):
        return int(value)
    if isinstance(value, numbers.Real):
        return float(value)
    return value


def check_sampling(params: Any) -> None:
    """n, the two free-form settings, temperature, the filters and the penalties."""
    require(is_int(params.n) and params.n >= 1, f"n must be an integer >= 1, got {params.n!r}")
    require(
        isinstance(params.spaces_between_special_tokens, bool),
        f"spaces_between_special_tokens must be true or false, got {params.spaces_between_special_tokens!r}",
    )
    require(
        params.extra_args is None
        or (isinstance(params.extra_args, dict) and all(isinstance(k, str) for k in params.extra_args)),
        f"extra_args must be a dict with string keys, got {params.extra_args!r}",
    )
    require(  # vLLM's bound: none above (a high temperature only flattens the distribution)
        is_finite(params.temperature) and params.temperature >= 0,
        f"temperature must be a finite number >= 0, got {params.temperature!r}",
    )
    require(_in_range(params.top_p, 0.0, 1.0) and params.top_p > 0, f"top_p must be in (0, 1], got {params.top_p!r}")
    require(
        is_int(params.top_k) and params.top_k >= 0, f"top_k must be -1, 0 or a positive integer, got {params.top_k!r}"
    )
    require(_in_range(params.min_p, 0.0, 1.0), f"min_p must be in [0, 1], got {params.min_p!r}")
    require(
        is_finite(params.repetition_penalty) and params.repetition_penalty > 0,
        f"repetition_penalty must be a finite number > 0, got {params.repetition_penalty!r}",
    )
    require(
        _in_range(params.presence_penalty, -2.0, 2.0),
        f"presence_penalty must be in [-2, 2], got {params.presence_penalty!r}",
    )
    require(
        _in_range(params.frequency_penalty, -2.0, 2.0),
        f"frequency_penalty must be in [-2, 2], got {params.frequency_penalty!r}",
    )


def check_token_rules(params: Any) -> None:
    """The token-id rules (logit_bias, allowed_token_ids, bad words), then truncate_prompt_tokens."""
    require(
        params.logit_bias is None
        or (
            isinstance(params.logit_bias, dict)
            and all(is_int(t) and t >= 0 and is_finite(v) for t, v in params.logit_bias.items())
        ),
        "logit_bias must map token ids (integers >= 0) to finite numbers",
    )
    require(
        params.allowed_token_ids is None or _is_token_ids(params.allowed_token_ids),
        "allowed_token_ids must be a list of token ids (integers >= 0)",
    )
    require(  # an empty list left every token allowed, the opposite of what it says (the server refuses it too)
        params.allowed_token_ids is None or len(params.allowed_token_ids) > 0,
        "allowed_token_ids is empty: no token could be sampled (None allows any)",
    )
    require(
        params.bad_words_token_ids is None or _is_token_id_lists(params.bad_words_token_ids),
        "bad_words_token_ids must be a list of non-empty lists of token ids",
    )
    require(
        params.bad_words is None
        or (isinstance(params.bad_words, list) and all(isinstance(w, str) and w.strip() for w in params.bad_words)),
        f"bad_words must be a list of non-blank strings, got {params.bad_words!r}",
    )
    require(
        params.truncate_prompt_tokens is None
        or (
            is_int(params.truncate_prompt_tokens)
            and (params.truncate_prompt_tokens >= 1 or params.truncate_prompt_tokens == -1)
        ),
        f"truncate_prompt_tokens must be -1 or an integer >= 1, got {params.truncate_prompt_tokens!r}",
    )


def check_thinking(params: Any) -> None:
    """The thinking budget and the token ids that open and end a thinking block."""
    for name in ("thinking_end_token_ids", "thinking_start_token_ids"):  # the sampler indexes them at every step
        value = getattr(params, name)
        require(
            value is None or _is_token_ids(value),
            f"{name} must be a list of token ids (integers >= 0) or None, got {value!r}",
        )
    others = params.thinking_other_end_token_ids
    require(
        others is None or _is_token_id_lists(others),
        f"thinking_other_end_token_ids must be a list of non-empty lists of token ids or None, got {others!r}",
    )
    require(
        params.thinking_token_budget is None
        or (
            is_int(params.thinking_token_budget) and params.thinking_token_budget >= 0 and params.thinking_end_token_ids
        ),
        "thinking_token_budget must be an integer >= 0, with thinking_end_token_ids (the tokens it forces)",
    )


def check_lengths_and_stops(params: Any) -> None:
    """The seed, max_tokens and min_tokens, the switches, and the stop strings and token ids."""
    require(params.seed is None or is_int(params.seed), f"seed must be an integer or None, got {params.seed!r}")
    require(
        params.max_tokens is None or (is_int(params.max_tokens) and params.max_tokens >= 1),
        f"max_tokens must be an integer >= 1 or None, got {params.max_tokens!r}",
    )
    require(
        is_int(params.min_tokens) and params.min_tokens >= 0,
        f"min_tokens must be an integer >= 0, got {params.min_tokens!r}",
    )
    for name in ("include_stop_str_in_output", "ignore_eos", "skip_special_tokens", "detokenize"):
        require(isinstance(getattr(params, name), bool), f"{name} must be true or false, got {getattr(params, name)!r}")
    require(
        params.max_tokens is None or params.min_tokens <= params.max_tokens,
        f"min_tokens ({params.min_tokens}) must not exceed max_tokens ({params.max_tokens})",
    )
    require(all(isinstance(s, str) and s for s in params.stop), "stop must be a list of non-empty strings")
    require(_is_token_ids(params.stop_token_ids), "stop_token_ids must be a list of non-negative integers")


def unsatisfiable_rules(
    allowed_token_ids: list[int] | None,
    bad_words_token_ids: list[list[int]] | None,
    min_tokens: int,
    end_token_ids: Iterable[int],
) -> str | None:
    """The error naming allowed_token_ids when the request's own rules bar every token it allows from the
    first step on (a one-token bad word bars its token everywhere; min_tokens bars `end_token_ids`, its EOS
    and stop ids, at the first token), else None. Sampling such a request could only break a rule; the
    sampler's fallback (layers/logits_rules.py) handles what arises mid-output."""
    if not allowed_token_ids:
        return None
    words = {seq[0] for seq in bad_words_token_ids or () if len(seq) == 1}
    ends = set(end_token_ids) if min_tokens > 0 else set()
    if not set(allowed_token_ids) <= words | ends:
        return None
    reasons = [
        reason
        for reason, ids in (
            ("one-token bad_words", words),
            (f"an EOS or stop token id before min_tokens ({min_tokens})", ends),
        )
        if ids & set(allowed_token_ids)
    ]
    return (
        f"allowed_token_ids: every allowed token is barred ({' or '.join(reasons)}), so no token could be "
        "sampled; allow another token or drop the rule that bars them"
    )


def outside_vocab(name: str, ids: Iterable[int], vocab_size: int) -> str | None:
    """The error naming field `name` for its first token id outside the vocabulary [0, vocab_size), or None."""
    bad = next((t for t in ids if t >= vocab_size), None)
    return None if bad is None else f"{name}: token id {bad} is outside the vocabulary [0, {vocab_size})"
