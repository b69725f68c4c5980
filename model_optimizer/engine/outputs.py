"""What the engine returns: one RequestOutput per user request, holding its n completions.

Imports nothing of the package, so SamplingParams can name RequestOutputKind without a cycle."""

from __future__ import annotations

import enum
from dataclasses import dataclass, field


@dataclass
class Logprob:
    """The chosen token's log-probability and the top-k alternatives at one step."""

    token_id: int
    logprob: float
    rank: int
    top: dict[int, float]


class RequestOutputKind(enum.Enum):
    """What each RequestOutput of a request holds (SamplingParams.output_kind).

    CUMULATIVE: everything so far (text, token ids, logprobs grow until finish_reason is set).
    DELTA: only what is new since the request's previous output; finish_reason on each completion's
    last delta. `outputs` then holds only the completions with something new (tokens or their finish),
    so with n > 1 a completion's index says which it is. Streaming servers use it: nothing is copied
    or sliced twice, whatever the output length.
    FINAL_ONLY: one output when the request (all n completions) has finished, cumulative.
    """

    CUMULATIVE = "cumulative"
    DELTA = "delta"
    FINAL_ONLY = "final_only"


@dataclass
class CompletionOutput:
    """One completion: so far (CUMULATIVE), new since the last output (DELTA), or all of it (FINAL_ONLY)."""

    index: int
    text: str
    token_ids: list[int]
    logprobs: list[Logprob] | None
    finish_reason: str | None = None
    """'stop' (EOS, stop token or stop string), 'length' (max_tokens or context), 'abort', 'error' (the
    request failed: see RequestOutput.error), or None while running."""
    stop_reason: int | str | None = None
    """The stop string or stop token id that ended it, if any."""

    @property
    def finished(self) -> bool:
        return self.finish_reason is not None


@dataclass
class RequestMetrics:
    """Times as seconds since the epoch (time.time())."""

    arrival_time: float
    first_token_time: float | None = None
    finished_time: float | None = None
    num_preemptions: int = 0
    first_scheduled_time: float | None = None
    """When the first completion first left the waiting queue."""

    @property
    def ttft(self) -> float | None:
        return None if self.first_token_time is None else self.first_token_time - self.arrival_time


@dataclass
class RequestOutput:
    request_id: str
    prompt: str | None
    prompt_token_ids: list[int]
    outputs: list[CompletionOutput]
    finished: bool
    num_cached_tokens: int = 0
    """Prompt tokens served from the prefix cache instead of being computed."""
    metrics: RequestMetrics = field(default_factory=lambda: RequestMetrics(0.0))
    error: str | None = None
    """Why the request failed (its completions end with finish_reason 'error'), e.g. NaN/inf logits:
    a fault of the model or its weights, not of the request. None when it did not fail."""

    @property
    def num_prompt_tokens(self) -> int:
        return len(self.prompt_token_ids)

    @property
    def num_output_tokens(self) -> int:
        return sum(len(o.token_ids) for o in self.outputs)
