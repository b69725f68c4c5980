"""What the engine returns: one RequestOutput per user request, holding its n completions."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from model_optimizer.runtime.engine.logprob_list import join_logprobs
from model_optimizer.runtime.sampler_output import Logprob
from model_optimizer.runtime.sampling_params import RequestOutputKind


@dataclass
class CompletionOutput:
    """One completion: so far (CUMULATIVE), new since the last output (DELTA), or all of it (FINAL_ONLY)."""

    index: int
    text: str
    token_ids: list[int]
    logprobs: Sequence[Logprob] | None
    """One per token of token_ids, when asked for: a LogprobList from the engine (a list of Logprob to read)."""
    finish_reason: str | None = None
    """'stop' (EOS, stop token or stop string), 'length' (max_tokens or context), 'abort', 'error' (the
    request failed: see RequestOutput.error), or None while running."""
    stop_reason: int | str | None = None
    """The stop string or stop token id that ended it, if any."""

    def finished(self) -> bool:
        """Whether this completion has ended (a method, as vLLM's CompletionOutput.finished)."""
        return self.finish_reason is not None

    @property
    def cumulative_logprob(self) -> float | None:
        """The sum of the tokens' log-probabilities (vLLM's field), when logprobs were asked for; None
        otherwise. A DELTA output sums only the tokens it holds."""
        return None if self.logprobs is None else sum(lp.logprob for lp in self.logprobs)


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
    prompt_logprobs: list[dict[int, Logprob] | None] | None = None
    """SamplingParams.prompt_logprobs: per prompt token, None for the first (nothing to score it from),
    then token id -> Logprob (logprob, rank) for the prompt token and the k most likely ones; None when
    not asked. DELTA outputs hold only the positions not handed out before (all of them in the first
    output that has a token)."""

    @property
    def num_prompt_tokens(self) -> int:
        return len(self.prompt_token_ids)

    @property
    def num_output_tokens(self) -> int:
        return sum(len(o.token_ids) for o in self.outputs)


def merge_outputs(outputs: list[RequestOutput], kind: RequestOutputKind) -> RequestOutput:
    """One output saying what `outputs` (consecutive outputs of one request, oldest first) said together.

    A streaming reader that falls behind the engine finds several outputs waiting; handing them over as
    one makes one SSE chunk instead of one per engine step, and a chunk costs the event loop far more
    than a token does. CUMULATIVE and FINAL_ONLY outputs each hold everything so far, so the newest
    stands for all. DELTA outputs are concatenated per completion index (with n > 1 an output holds only
    the completions with something new): see `_merge_deltas` for every field.
    """
    if not outputs:
        raise ValueError("merge_outputs needs at least one output, got none")
    request_id = outputs[0].request_id
    for output in outputs:
        if output.request_id != request_id:
            raise ValueError(
                f"merge_outputs merges outputs of one request, got {request_id!r} and {output.request_id!r}"
            )
    if len(outputs) == 1 or kind is not RequestOutputKind.DELTA:
        return outputs[-1]
    return _merge_deltas(outputs)


def _merge_deltas(outputs: list[RequestOutput]) -> RequestOutput:
    """DELTA outputs as one delta. Per completion: token ids, text and logprobs concatenated (logprobs
    stay one per token), the newest finish_reason and stop_reason set. Per request: prompt fields from
    the first (they never change), finished, num_cached_tokens and metrics from the newest (the
    newest state), error from the newest that has one (a failed request's last output carries it),
    prompt logprobs concatenated.

    Runs on the server's event loop for a reader that is already behind, so it is kept lean."""
    parts: dict[int, list[CompletionOutput]] = {}
    error = None
    for output in outputs:
        if output.error is not None:
            error = output.error
        for completion in output.outputs:
            same = parts.get(completion.index)
            if same is None:
                parts[completion.index] = [completion]
            else:
                same.append(completion)
    first, last = outputs[0], outputs[-1]
    prompt_logprobs = None
    for output in outputs:
        if output.prompt_logprobs:
            prompt_logprobs = (prompt_logprobs or []) + output.prompt_logprobs
    return RequestOutput(
        last.request_id,
        first.prompt,
        first.prompt_token_ids,
        [_join(parts[index]) for index in sorted(parts)] if len(parts) > 1 else [_join(p) for p in parts.values()],
        last.finished,
        last.num_cached_tokens,
        last.metrics,
        error,
        prompt_logprobs if prompt_logprobs is not None else first.prompt_logprobs,
    )


def _join(parts: list[CompletionOutput]) -> CompletionOutput:
    """One completion's consecutive deltas as one (new lists: the deltas themselves are left as they were)."""
    if len(parts) == 1:
        return parts[0]
    token_ids: list[int] = []
    finish_reason = stop_reason = None
    runs = [p.logprobs for p in parts if p.logprobs is not None]  # an abort's last output may have none
    logprobs = join_logprobs(runs) if runs else None
    for part in parts:
        token_ids += part.token_ids
        if part.finish_reason is not None:
            finish_reason, stop_reason = part.finish_reason, part.stop_reason
    text = "".join([part.text for part in parts])
    return CompletionOutput(parts[0].index, text, token_ids, logprobs, finish_reason, stop_reason)


@dataclass
class EmbeddingOutput:
    """One input's embedding (vLLM's EmbeddingOutput)."""

    embedding: list[float]

    @property
    def hidden_size(self) -> int:
        return len(self.embedding)


@dataclass
class EmbeddingRequestOutput:
    """What LLM.embed returns per input, in vLLM's shape: `output.outputs.embedding`."""

    request_id: str
    outputs: EmbeddingOutput
    prompt_token_ids: list[int]
    finished: bool = True


@dataclass
class ScoringOutput:
    """One pair's score (vLLM's ScoringOutput): an embedding model's cosine similarity of the two texts."""

    score: float


@dataclass
class ScoringRequestOutput:
    """What LLM.score returns per pair, in vLLM's shape: `output.outputs.score`; `prompt_token_ids` are the
    first text's ids, then the second's."""

    request_id: str
    outputs: ScoringOutput
    prompt_token_ids: list[int]
    finished: bool = True
