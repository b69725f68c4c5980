"""SchedulerOutput: what one engine step computes, as plain data the runner (or a worker process) reads."""

from __future__ import annotations

from dataclasses import dataclass, field

from model_optimizer.runtime.sampling_params import SamplingParams


@dataclass
class NewRequestData:
    """A request the runner has not seen yet (or is seeing again after preemption)."""

    request_id: str
    """The completion's id (n > 1 completions have one each)."""
    prompt_token_ids: list[int]
    """The whole prompt (shared, not copied: neither side changes it)."""
    output_token_ids: list[int]
    """Tokens generated before a preemption (a copy); empty for a fresh request."""
    params: SamplingParams
    """How it samples: the runner keeps them with its own copy of the request."""
    block_ids: list[int]
    """Its KV-cache blocks so far, in order: row of the runner's block table."""
    num_computed_tokens: int
    """Tokens whose KV is already in the cache (prefix hit), so this step starts after them."""
    prompt_logprobs: bool = False
    """Its prefill chunks report the log-probabilities of the prompt tokens (params.prompt_logprobs of
    them each); False for the n - 1 siblings that share them and once they have all been reported."""


@dataclass
class CachedRequestData:
    """A request the runner already holds: only what changed since the last step."""

    request_id: str
    new_block_ids: list[int]
    """Blocks allocated since the runner last heard of it, appended to its block-table row."""
    num_computed_tokens: int
    """Tokens computed before this step; this step computes the next num_scheduled_tokens[request_id]."""
    num_kept_blocks: int | None = None
    """Set after a speculative rollback freed blocks at the end of its table: the runner keeps only this
    many of the blocks it was sent before appending new_block_ids."""


@dataclass
class SchedulerOutput:
    """What one engine step computes, as plain data: ids, token ids, block ids and sampling params.

    The runner needs nothing else and cannot reach back into the scheduler's live Requests, so a
    test builds one by hand and tensor-parallel workers can receive it as it is.
    """

    step_id: int = 0
    """The step's number; update_from_output finds by it the requests that sampled."""
    new_requests: list[NewRequestData] = field(default_factory=list)
    cached_requests: list[CachedRequestData] = field(default_factory=list)
    num_scheduled_tokens: dict[str, int] = field(default_factory=dict)
    """Tokens to compute this step, per request id, in batch order."""
    finished_request_ids: set[str] = field(default_factory=set)
    """Requests finished, aborted or preempted since the last step: the runner drops their state."""
    sampling_request_ids: set[str] = field(default_factory=set)
    """Requests whose last scheduled token yields a new token this step (all but partial prompt chunks)."""
    needs_history: bool = False
    """Some sampling request reads its generated tokens on the host (penalties): the previous step's
    tokens must be collected before this step is launched (see engine.py)."""
    num_prompt_tokens: int = 0
    """Prompt tokens (recomputed ones after preemption included) this step computes."""
    spec_token_ids: dict[str, list[int]] = field(default_factory=dict)
    """Speculative decoding: per request that verifies proposals this step, the k proposed tokens that
    follow its last one (num_scheduled_tokens counts 1 + k for it). A draft model's proposals are made on
    the device inside the step, so their ids here are spec_decode.counters.DRAFT_TOKEN."""

    kv_saves: list[tuple[int, int]] = field(default_factory=list)
    """Host KV tier: (GPU block id, host slot) of evicted cached blocks and of swapped-out requests' blocks
    (preemption_mode swap) to save, before anything else this step."""
    kv_loads: list[tuple[int, int]] = field(default_factory=list)
    """Host KV tier: (host slot, GPU block id) of prefix hits in host memory and of resuming swapped-out
    requests' blocks to load, after the saves and before the forward."""

    def __reduce__(self) -> tuple:
        """Pickled once per step for tensor-parallel workers (executor/executor.py): the cached requests,
        up to max_num_seqs of them in every decode step, travel as three columns instead of as objects:
        several times cheaper to pickle and unpickle than one object per request."""
        cached = self.cached_requests
        columns = (
            [r.request_id for r in cached],
            [r.new_block_ids for r in cached],
            [r.num_computed_tokens for r in cached],
            [r.num_kept_blocks for r in cached],
        )
        return _rebuild, ({**self.__dict__, "cached_requests": columns},)

    @property
    def total_num_scheduled_tokens(self) -> int:
        return sum(self.num_scheduled_tokens.values())

    @property
    def is_empty(self) -> bool:
        return not self.num_scheduled_tokens


def _rebuild(state: dict) -> SchedulerOutput:
    ids, block_ids, computed, kept = state["cached_requests"]
    state["cached_requests"] = [CachedRequestData(*fields) for fields in zip(ids, block_ids, computed, kept)]
    out = SchedulerOutput.__new__(SchedulerOutput)
    out.__dict__.update(state)
    return out
