"""What the sampler reports for each sequence and step, in plain Python.

The torch sampler (layers/sampler.py) makes these; the engine core (engine/) consumes them and
never imports torch, so they live below both.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

NONFINITE_TOKEN = -1
"""The token id a runner reports for a request whose logits were NaN or inf: the request fails."""


@dataclass(frozen=True, slots=True)
class TokenLogprob:
    """One token's log-probability and rank (1: the most likely), as vLLM's Logprob holds them: what
    `Logprob[token_id]` gives."""

    logprob: float
    rank: int


@dataclass(slots=True)
class Logprob:
    """The chosen token's log-probability and the top-k alternatives at one step (slots: the core makes
    one per token of every request that asks for logprobs).

    Also reads like vLLM's per-token dict, token id -> TokenLogprob (the chosen token, then the
    alternatives, ranked by their place in `top`): `lp[token_id].logprob`, `lp.items()`, `dict(lp)`, so
    code written for vLLM reads it unchanged. Not a Mapping subclass, and its values are leaves, so a
    walker that recurses into mappings stops here."""

    token_id: int
    logprob: float
    rank: int
    top: dict[int, float]

    def __getitem__(self, token_id: int) -> TokenLogprob:
        if token_id == self.token_id:
            return TokenLogprob(self.logprob, self.rank)
        for rank, (top_id, value) in enumerate(self.top.items(), 1):
            if top_id == token_id:
                return TokenLogprob(value, rank)
        raise KeyError(token_id)

    def __iter__(self) -> Iterator[int]:
        yield self.token_id
        yield from (t for t in self.top if t != self.token_id)

    def __len__(self) -> int:
        return 1 + sum(1 for t in self.top if t != self.token_id)

    def __contains__(self, token_id: object) -> bool:
        return token_id == self.token_id or token_id in self.top

    def keys(self) -> list[int]:
        return list(self)

    def values(self) -> list[TokenLogprob]:
        return [self[t] for t in self]

    def items(self) -> list[tuple[int, TokenLogprob]]:
        return [(t, self[t]) for t in self]

    def get(self, token_id: int, default: TokenLogprob | None = None) -> TokenLogprob | None:
        return self[token_id] if token_id in self else default


@dataclass
class PromptLogprobs:
    """Log-probabilities of a run of one request's prompt tokens, computed from a prefill chunk's logits.

    Position i covers prompt token `start + i` (start >= 1: the first token has no context to be scored
    from). Column-wise and flat, as the runner gathers them on the device: cheap to pickle (tensor
    parallel) and to lay into the core's messages (engine/messages.py)."""

    start: int
    """Index in the prompt of the first token covered."""
    token_ids: list[int]
    """The prompt tokens covered, in order."""
    logprobs: list[float]
    """Each prompt token's log-probability under the model, given the tokens before it."""
    ranks: list[int]
    """Each prompt token's rank in its distribution (1: the most likely)."""
    num_top: int
    """How many alternatives each position has in top_ids / top_logprobs (the request's prompt_logprobs)."""
    top_ids: list[int]
    """num_top most likely token ids per position, most likely first, positions one after another."""
    top_logprobs: list[float]

    def __len__(self) -> int:
        return len(self.token_ids)

    def tail(self, start: int) -> PromptLogprobs:
        """The positions from prompt index `start` on (a preempted prefill recomputes ones already reported)."""
        skip = max(start - self.start, 0)
        k = self.num_top
        return PromptLogprobs(
            self.start + skip,
            self.token_ids[skip:],
            self.logprobs[skip:],
            self.ranks[skip:],
            k,
            self.top_ids[skip * k :],
            self.top_logprobs[skip * k :],
        )


class StepResults(dict):
    """What a runner's `collect` returns: request id -> (token id, logprob or None) for the requests that
    sampled (see engine/step_runner.py), and, in `prompt_logprobs`, request id -> the PromptLogprobs
    of the prompt positions the step computed for requests that asked for them. A dict, so a runner with
    nothing to add (a test's fake) may return a plain one."""

    prompt_logprobs: dict[str, PromptLogprobs]

    def __init__(self, *args: object, prompt_logprobs: dict[str, PromptLogprobs] | None = None) -> None:
        super().__init__(*args)
        self.prompt_logprobs = prompt_logprobs or {}
