"""The rules the torch sampling path applies to a batch's logits before temperature (layers/sampler.py gives
the whole order): penalties, then logit_bias, allowed and barred tokens (vLLM's allowed_token_ids and bad
words), min_tokens' barred stops, and a thinking budget's forced end tag. Each works on the device without a
host sync; a row the rules leave without any token falls back (see `apply_token_rules`)."""

from __future__ import annotations

from typing import Protocol

import torch

from model_optimizer.runtime.device import to_device
from model_optimizer.runtime.sampling_params import SamplingParams


class SamplingRow(Protocol):
    """What the rules read of a row's SamplingInput (layers/sampler.py, which imports this module)."""

    params: SamplingParams
    prompt_token_ids: list[int]
    output_token_ids: list[int]

    @property
    def output_index(self) -> int: ...


def apply_penalties(logits: torch.Tensor, batch: list[SamplingRow]) -> torch.Tensor:
    """Each row's repetition penalty (over its prompt and output tokens), then its presence and frequency
    penalties (over its output tokens), in place."""
    for i, item in enumerate(batch):
        p = item.params
        if p.repetition_penalty != 1.0:
            seen = to_device(
                sorted(set(item.prompt_token_ids) | set(item.output_token_ids)), logits.device, torch.int64
            )
            row = logits[i, seen]
            logits[i, seen] = torch.where(row > 0, row / p.repetition_penalty, row * p.repetition_penalty)
        if (p.presence_penalty or p.frequency_penalty) and item.output_token_ids:
            out = to_device(item.output_token_ids, logits.device, torch.int64)
            counts = torch.bincount(out, minlength=logits.shape[-1]).float()
            logits[i] -= p.frequency_penalty * counts + p.presence_penalty * (counts > 0).float()
    return logits


def apply_token_rules(logits: torch.Tensor, batch: list[SamplingRow]) -> torch.Tensor:
    """Each row's logit_bias added, and the tokens it may not take (outside allowed_token_ids, ending one
    of its bad words here, or an EOS or stop token before min_tokens) set to -inf, in place. Ids past the vocabulary are the caller's to refuse.
    Where the rules (and a grammar's mask) together leave no token at all, the row falls back for that step,
    chosen on the device (no sync): to its logits with allowed_token_ids alone applied (no bias, bad word or
    min_tokens bar), so a request never draws a token outside allowed_token_ids; where that leaves nothing
    either (the grammar allows none of them) or the request has no allowed_token_ids, to its logits before
    any rule (grammar-masked: the output stays in its grammar, which wins over every rule). Conflicts visible
    from the request alone (every allowed id a one-token bad word, or an EOS or stop id before min_tokens)
    are refused before it is queued (sampling_checks.unsatisfiable_rules); this covers those that arise
    mid-output (a multi-token bad word completing). A thinking budget's forced end tag wins over the rules
    (a bad word or a bias cannot keep the model thinking past its budget), though not over the grammar."""
    for i, item in enumerate(batch):
        p = item.params
        if p.thinking_token_budget is not None:
            forced = _thinking_end(item.output_token_ids[: item.output_index], p)
            if forced is not None and logits[i, forced].isfinite():  # not where a grammar forbids it this step
                _keep_only(logits[i], forced)
                continue
        too_soon = item.output_index < p.min_tokens and p.min_tokens_barred
        bars = p.allowed_token_ids is not None or p.bad_words_token_ids or too_soon
        before = logits[i].clone() if bars else None
        if p.logit_bias:
            ids = to_device(list(p.logit_bias), logits.device, torch.int64)
            logits[i].index_add_(0, ids, to_device(list(p.logit_bias.values()), logits.device, logits.dtype))
        allowed = None if p.allowed_token_ids is None else to_device(p.allowed_token_ids, logits.device, torch.int64)
        if allowed is not None:
            _keep_only(logits[i], allowed)
        if p.bad_words_token_ids:
            out = item.output_token_ids[: item.output_index]
            barred = [seq[-1] for seq in p.bad_words_token_ids if len(seq) == 1 or out[-(len(seq) - 1) :] == seq[:-1]]
            if barred:
                logits[i, to_device(barred, logits.device, torch.int64)] = float("-inf")
        if too_soon:  # min_tokens: no EOS or stop token yet
            logits[i, to_device(list(p.min_tokens_barred), logits.device, torch.int64)] = float("-inf")
        if before is not None:
            logits[i] = torch.where(logits[i].isfinite().any(), logits[i], _fallback(before, allowed))
    return logits


def _fallback(before: torch.Tensor, allowed: torch.Tensor | None) -> torch.Tensor:
    """A row's logits for a step its rules leave no token: `before` (its logits before any rule) with only
    `allowed` kept, unless that leaves none (its grammar forbids them all) or there is no `allowed`. Picked
    with torch.where: no host sync."""
    if allowed is None:
        return before
    only = before.clone()
    _keep_only(only, allowed)
    return torch.where(only.isfinite().any(), only, before)


def _keep_only(row: torch.Tensor, ids: torch.Tensor | int) -> None:
    """Every logit of `row` but those at `ids` set to -inf, in place."""
    keep = row[ids].clone()
    row.fill_(float("-inf"))
    row[ids] = keep


def _thinking_end(out: list[int], p: SamplingParams) -> int | None:
    """The token the thinking budget forces next, or None. Thinking starts at the output's start (or after
    thinking_start_token_ids, when the output opens with them); once it has lasted the budget without its
    end tokens, they are forced one a step (continuing an end the model began) until the end is whole, a
    step the grammar forbade the token (inside a multi-byte character) included."""
    start, end = p.thinking_start_token_ids or [], p.thinking_end_token_ids or []
    if start and out[: len(start)] != start:
        return None  # not thinking (or not yet known to)
    thought = out[len(start) :]
    if len(thought) < p.thinking_token_budget or _holds(thought, end):  # type: ignore[operator]
        return None  # within the budget, or ended (by itself or forced)
    if any(_holds(thought, other) for other in p.thinking_other_end_token_ids or ()):
        return None  # ended another way (Kimi-K2's tool section), whose call the end would break
    done = next(j for j in range(min(len(end), len(thought)), -1, -1) if j == 0 or thought[-j:] == end[:j])
    return end[done]


def _holds(tokens: list[int], seq: list[int]) -> bool:
    """Whether `seq` occurs in `tokens` (list.index does the scanning, in C)."""
    at = 0
    while True:
        try:
            at = tokens.index(seq[0], at)
        except ValueError:
            return False
        if tokens[at : at + len(seq)] == seq:
            return True
        at += 1
