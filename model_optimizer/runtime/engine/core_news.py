"""CoreNews: what the core has to tell its frontends since its last outputs, as rows per client.

A row is one completion's news (engine/messages.py, OutputsBuilder): the tokens a step gave it and
their logprobs, how it finished, and with its first row how its first schedule went. The core decides
what happened (core.py: a step collected, a group failed, a grammar that did not compile); here it is
written down, each row in the builder of the frontend that sent the request.
"""

from __future__ import annotations

from model_optimizer.runtime.engine.messages import (
    CoreOutputs,
    EngineStats,
    Finish,
    OutputsBuilder,
    PromptLogprobsPart,
    Started,
)
from model_optimizer.runtime.engine.request import Request
from model_optimizer.runtime.sampler_output import Logprob, PromptLogprobs


class CoreNews:
    """Per client, one OutputsBuilder: the rows made since the last outputs went out."""

    __slots__ = ("builders", "client_of")

    def __init__(self, num_clients: int, client_of: dict[str, int]) -> None:
        self.builders = [OutputsBuilder() for _ in range(num_clients)]
        self.client_of = client_of
        """Request id -> the frontend it came from: the core's own map, which forgets a request after its
        last row, so it is read as each row is written."""

    def build(self, stats: EngineStats) -> list[CoreOutputs]:
        """Per client, its outputs: its rows and `stats`."""
        return [builder.build(stats) for builder in self.builders]

    def tokens(self, request: Request) -> int:
        """A row with the tokens the last step gave `request` and their logprobs, and its Finish if they
        ended it. Returns how many tokens."""
        out = self._out(request)
        n = request.num_step_tokens
        logprobs = None
        if request.params.logprobs is not None:
            logprobs = request.logprobs[-n:] if n else None
            request.logprobs = []  # reported: nothing reads them again
        if n == 1:
            row = _row(out, request, [request.output_token_ids[-1]], logprobs)
        else:  # it verified proposals: 0 (it failed) to k + 1 tokens
            row = _row(out, request, request.output_token_ids[-n:] if n else [], logprobs)
        if request.finished:
            out.finished.append(_finish_of(row, request))
        return n

    def finished(self, request: Request) -> None:
        """A row without tokens that finishes `request` (it failed, or its grammar did not compile)."""
        out = self._out(request)
        out.finished.append(_finish_of(_row(out, request, [], None), request))

    def prompt_logprobs(self, parts: dict[str, PromptLogprobs], requests: dict[str, Request]) -> None:
        """Send each request's new prompt logprobs, once: a prefill preempted midway is computed again from
        its start, and the positions already reported are left out. `requests`: those whose prompt logprobs
        the step computed, by id (Scheduler.prompt_logprob_requests: a new request under the id of one
        aborted since the step was launched is not among them)."""
        for request_id, part in parts.items():
            request = requests.get(request_id)
            if request is None or request.finished or not request.needs_prompt_logprobs:
                continue  # finished or aborted since the step was launched
            part = part.tail(request.next_prompt_logprob)
            if part.start != request.next_prompt_logprob:
                raise RuntimeError(
                    f"prompt logprobs of request {request_id!r} skip from token {request.next_prompt_logprob} "
                    f"to {part.start}"
                )
            if not len(part):
                continue
            request.next_prompt_logprob += len(part)
            out = self._out(request)
            out.prompt_logprobs.append(PromptLogprobsPart.of(request.parent_id, part))  # type: ignore[arg-type]

    def _out(self, request: Request) -> OutputsBuilder:
        return self.builders[self.client_of.get(request.parent_id, 0)]  # type: ignore[arg-type]


def _row(out: OutputsBuilder, request: Request, token_ids: list[int], logprobs: list[Logprob] | None) -> int:
    """A row of `request`; its first one also says how its first schedule went (Started)."""
    row = out.row(request.parent_id, request.index, token_ids, logprobs)  # type: ignore[arg-type]
    if not request.start_reported and request.first_scheduled_time is not None:
        request.start_reported = True
        out.started.append(Started(row, request.num_cached_tokens, request.first_scheduled_time))
    return row


def _finish_of(row: int, request: Request) -> Finish:
    stop = request.stop_reason
    return Finish(
        row,
        request.status.value,
        stop if isinstance(stop, int) else None,
        request.error,
        request.num_preemptions,
        request.stopped_on_token,
    )
