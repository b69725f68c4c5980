"""What the sampler reports for each sequence and step, in plain Python.

The torch sampler (layers/sampler.py) makes these; the engine core (engine/) consumes them and
never imports torch, so they live below both.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass

NONFINITE_TOKEN = -1
"""The token id a runner reports for a request whose logits were NaN or inf: the request fails."""


@dataclass(slots=True)
class Logprob(Mapping[int, "Logprob"]):
    """The chosen token's log-probability and the top-k alternatives at one step (slots: the core makes
    one per token of every request that asks for logprobs).

    Also a read-only mapping in the shape of vLLM's per-token dict: token id -> Logprob of that token
    (the chosen one, then the alternatives, ranked by their place in `top`), so code written for vLLM
    (`lp[token_id].logprob`, `lp.items()`) reads it unchanged."""

    token_id: int
    logprob: float
    rank: int
    top: dict[int, float]

    def __getitem__(self, token_id: int) -> Logprob:
        if token_id == self.token_id:
            return Logprob(self.token_id, self.logprob, self.rank, {}) if self.top else self
        for rank, (top_id, value) in enumerate(self.top.items(), 1):
            if top_id == token_id:
                return Logprob(top_id, value, rank, {})
        raise KeyError(token_id)

    def __iter__(self) -> Iterator[int]:
        yield self.token_id
        yield from (t for t in self.top if t != self.token_id)

    def __len__(self) -> int:
        return 1 + sum(1 for t in self.top if t != self.token_id)


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
