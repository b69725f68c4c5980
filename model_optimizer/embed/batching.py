"""Group inputs into forward passes by a token budget: sorted by length, packed end to end."""

from __future__ import annotations


def plan_batches(lengths: list[int], max_num_batched_tokens: int, max_num_seqs: int) -> list[list[int]]:
    """Input indices grouped into batches, longest inputs first.

    Each batch holds at most `max_num_seqs` inputs and `max_num_batched_tokens` tokens, except that
    an input longer than the budget still gets a batch of its own. Sorting by length keeps the
    sequences of one batch alike, which is what the attention's padded fallback pays for.
    """
    order = sorted(range(len(lengths)), key=lambda i: lengths[i], reverse=True)
    batches: list[list[int]] = []
    current: list[int] = []
    num_tokens = 0
    for i in order:
        if current and (num_tokens + lengths[i] > max_num_batched_tokens or len(current) == max_num_seqs):
            batches.append(current)
            current, num_tokens = [], 0
        current.append(i)
        num_tokens += lengths[i]
    if current:
        batches.append(current)
    return batches
