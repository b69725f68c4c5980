"""N-gram proposals (prompt lookup): guess the next tokens from the request's own prompt and output.

Text that quotes or edits its input (summaries, code changes, extraction) repeats long runs of it. The
proposer takes the request's last n tokens, n from prompt_lookup_max down to prompt_lookup_min, finds
the latest earlier place where they occur, and proposes the tokens that followed there. Among the
matches of the longest n that has any, the latest one with a full k tokens after it wins (recent
context predicts best; a match right at the end would offer fewer tokens).

Host side and cheap: each request's tokens are kept in a growing numpy array (only new tokens are
copied in), and a lookup is one vectorized comparison over it plus a few over the places it matched:
about 10 microseconds at 8k tokens (benchmarks/spec_host_overhead.py has the step it is part of).
"""

from __future__ import annotations

import weakref
from typing import Protocol

import numpy as np


class _Tokens(Protocol):
    prompt_token_ids: list[int]
    output_token_ids: list[int]


class _History:
    """One request's tokens as a numpy array that grows by doubling."""

    __slots__ = ("array", "length")

    def __init__(self, capacity: int) -> None:
        self.array = np.empty(max(capacity, 16), dtype=np.int64)
        self.length = 0

    def sync(self, request: _Tokens) -> np.ndarray:
        """The request's tokens so far (prompt + output), copying in only those added since the last call."""
        num_prompt = len(request.prompt_token_ids)
        total = num_prompt + len(request.output_token_ids)
        if total > len(self.array):
            grown = np.empty(max(total, 2 * len(self.array)), dtype=np.int64)
            grown[: self.length] = self.array[: self.length]
            self.array = grown
        if self.length < num_prompt:
            self.array[self.length : num_prompt] = request.prompt_token_ids[self.length :]
            self.length = num_prompt
        if self.length < total:
            self.array[self.length : total] = request.output_token_ids[self.length - num_prompt :]
            self.length = total
        return self.array[:total]


def lookup(tokens: np.ndarray, k: int, min_n: int, max_n: int) -> list[int]:
    """Up to k tokens that followed an earlier occurrence of the last n tokens (see the module docstring).

    One pass over the history finds where the last token occurred before (with a token after it); the
    suffix each of those places matches is then grown backwards over those places alone, so a lookup
    costs one comparison of the history whatever max_n is, and whether or not anything matches."""
    length = len(tokens)
    max_n = min(max_n, length - 1)
    if max_n < min_n:
        return []
    ends = np.flatnonzero(tokens[: length - 1] == tokens[-1]) + 1  # where a proposal would begin
    if not len(ends):
        return []
    n = 1  # the suffix length all of `ends` (ascending) match
    while n < max_n:
        candidates = ends[ends > n] if ends[0] <= n else ends  # room for one more token before them
        longer = candidates[tokens[candidates - (n + 1)] == tokens[length - n - 1]]
        if not len(longer):
            break
        ends, n = longer, n + 1
    if n < min_n:
        return []
    full = ends[length - ends >= k]
    begin = int(full[-1]) if len(full) else int(ends[0])  # latest with k tokens, else the longest
    return tokens[begin : begin + k].tolist()


class NgramProposer:
    """Proposes up to `k` tokens per request by prompt lookup; keeps each request's tokens while it lives."""

    def __init__(self, k: int, min_n: int, max_n: int) -> None:
        self.k, self.min_n, self.max_n = k, min_n, max_n
        self._histories: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
        """Request -> its _History; gone with the request (no bookkeeping at finish or preemption)."""

    def propose(self, request: _Tokens, k: int | None = None) -> list[int]:
        """Up to `k` (default: the configured k) proposed tokens; empty when no n-gram matches."""
        k = self.k if k is None else k
        if k <= 0:
            return []
        history = self._histories.get(request)
        if history is None:
            history = self._histories[request] = _History(len(request.prompt_token_ids) * 2)
        return lookup(history.sync(request), k, self.min_n, self.max_n)
