"""Request: the engine's state for one sequence, from arrival to finish."""

from __future__ import annotations

import enum
import time
from dataclasses import dataclass, field

from model_optimizer.runtime.sampler_output import NONFINITE_TOKEN, Logprob
from model_optimizer.runtime.sampling_params import SamplingParams

__all__ = ["Logprob", "Request", "RequestStatus", "NONFINITE_TOKEN", "NONFINITE_ERROR"]

NONFINITE_ERROR = "the model produced NaN/inf logits for this request"


class RequestStatus(enum.Enum):
    WAITING = "waiting"
    RUNNING = "running"
    PREEMPTED = "preempted"
    FINISHED_STOPPED = "stop"
    FINISHED_LENGTH = "length"
    FINISHED_ABORTED = "abort"
    FINISHED_ERROR = "error"
    """The request failed alone (its `error` says why); the others in its batch go on."""

    def __init__(self, value: str) -> None:
        self.finished = value in ("stop", "length", "abort", "error")
        """A plain attribute: read every step for every request, where a set lookup would call the
        enum's Python-level __hash__ (the engine thread's top item when serving 64 streams)."""


@dataclass(eq=False)
class Request:
    """One sequence being generated. `n > 1` requests are split into one Request per completion.

    The only progress measure is `num_computed_tokens` catching up with `num_tokens`: a prompt
    prefill, a chunk of it, a prefix-cache hit and a decode step are all the same thing.
    """

    request_id: str
    prompt_token_ids: list[int]
    params: SamplingParams
    eos_token_ids: frozenset[int] = frozenset()
    """Tokens that end the sequence unless params.ignore_eos."""
    max_tokens: int = 16
    """Output length limit, already capped by the model's context length."""
    priority: int = 0
    arrival_time: float = field(default_factory=time.time)
    parent_id: str | None = None
    """Id of the user request this completion belongs to (itself when n == 1)."""
    index: int = 0
    """Which of the parent's n completions this is."""
    share_prompt_with: Request | None = None
    """A sibling whose prompt blocks this request reuses instead of computing its own."""

    output_token_ids: list[int] = field(default_factory=list)
    logprobs: list[Logprob] = field(default_factory=list)
    """Logprobs of the newest tokens not yet put in a CoreOutputs row (the core empties it as it reports
    them): kept for the request's whole life they were garbage the collector walked on every pass."""
    num_computed_tokens: int = 0
    """Tokens whose KV is computed or being computed by a scheduled step."""
    num_pending: int = 0
    """Tokens sampled by scheduled steps whose ids have not come back yet (0 or 1)."""
    num_cached_tokens: int = 0
    """Prompt tokens served from the prefix cache (or a sibling) at the first schedule."""
    status: RequestStatus = RequestStatus.WAITING
    stop_reason: int | str | None = None
    stopped_on_token: bool = False
    """Its last token ended it (EOS or a stop token id): that token's text is left out of the output."""
    first_token_time: float | None = None
    finished_time: float | None = None
    first_scheduled_time: float | None = None
    """When the request first left the waiting queue (the end of its queue time)."""
    num_preemptions: int = 0
    num_swapped_tokens: int = 0
    """Tokens whose KV waits in host memory while the request is preempted (preemption_mode swap); 0: none."""
    error: str | None = None
    """Why the request failed (status FINISHED_ERROR)."""
    start_reported: bool = False
    """The core has told the frontend of its first schedule (cached prompt tokens, when)."""
    block_hashes: list[int] = field(default_factory=list)
    """Chained hashes of this request's full blocks, filled as blocks fill up."""
    num_step_tokens: int = 0
    """Tokens the last collected step appended (1, or up to 1 + k when it verified k proposals)."""
    next_prompt_logprob: int = 1
    """Prompt logprobs: index of the first prompt token whose logprob has not been reported yet."""

    def __post_init__(self) -> None:
        if self.parent_id is None:
            self.parent_id = self.request_id

    @property
    def num_prompt_tokens(self) -> int:
        return len(self.prompt_token_ids)

    @property
    def num_output_tokens(self) -> int:
        return len(self.output_token_ids)

    @property
    def num_tokens(self) -> int:
        return len(self.prompt_token_ids) + len(self.output_token_ids)

    def token_ids_range(self, start: int, end: int) -> list[int]:
        """Token ids at positions [start, end) of prompt + output, without copying the whole list."""
        num_prompt = len(self.prompt_token_ids)
        if end <= num_prompt:
            return self.prompt_token_ids[start:end]
        if start >= num_prompt:
            return self.output_token_ids[start - num_prompt : end - num_prompt]
        return self.prompt_token_ids[start:] + self.output_token_ids[: end - num_prompt]

    @property
    def needs_prompt_logprobs(self) -> bool:
        """Whether this completion still owes prompt logprobs: the first of a request that asked for them
        (its siblings share them) until each prompt token but the first has been reported. Its prefill
        computes every prompt position then: no prefix-cache hit (kv_cache.computed_blocks)."""
        return (
            self.params.prompt_logprobs is not None
            and self.index == 0
            and self.next_prompt_logprob < len(self.prompt_token_ids)
        )

    @property
    def finished(self) -> bool:
        return self.status.finished

    @property
    def finish_reason(self) -> str | None:
        return self.status.value if self.status.finished else None

    def append_output_token(self, token_id: int, logprob: Logprob | None) -> None:
        if self.first_token_time is None:
            self.first_token_time = time.time()
        self.output_token_ids.append(token_id)
        if logprob is not None:
            self.logprobs.append(logprob)

    def check_stop(self) -> bool:
        """Token-level stop rules after a new token: EOS, stop token ids, length. Stop strings are checked
        after detokenizing, outside the core loop."""
        if self.num_output_tokens >= self.max_tokens:
            self.status = RequestStatus.FINISHED_LENGTH
            return True
        if self.num_output_tokens < self.params.min_tokens:
            return False
        last = self.output_token_ids[-1]
        if not self.params.ignore_eos and last in self.eos_token_ids:
            self.status = RequestStatus.FINISHED_STOPPED
            self.stopped_on_token = True
            return True
        if last in self.params.stop_token_ids:
            self.status = RequestStatus.FINISHED_STOPPED
            self.stop_reason = last
            self.stopped_on_token = True
            return True
        return False
