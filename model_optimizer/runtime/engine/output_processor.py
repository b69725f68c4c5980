"""After the core loop: the token ids of each step become the outputs callers asked for.

The core (scheduler and runner) appends token ids to its Requests and applies the token-level
stops (EOS, stop token ids, length). Everything else happens here, once per completion that got a
token: incremental detokenizing, stop strings, merging a user request's n completions into one
RequestOutput, and shaping that output by the request's RequestOutputKind:

- CUMULATIVE copies every completion's tokens so far (what a caller asking for snapshots wants);
- DELTA hands out only what is new since the request's last output, so a stream of any length
  costs each token once;
- FINAL_ONLY builds one output, when all n completions have finished.

Text is decoded as tokens arrive only when someone reads it before the end (DELTA, a streaming
CUMULATIVE request, or stop strings to look for); otherwise once, at finish.
"""

from __future__ import annotations

from dataclasses import dataclass

from model_optimizer.runtime.engine.detokenizer import IncrementalDetokenizer
from model_optimizer.runtime.engine.input_processor import Tokenizer
from model_optimizer.runtime.engine.outputs import CompletionOutput, RequestMetrics, RequestOutput
from model_optimizer.runtime.engine.request import Request
from model_optimizer.runtime.sampling_params import RequestOutputKind


@dataclass
class _Completion:
    """What one completion has been told so far."""

    request: Request
    detokenizer: IncrementalDetokenizer | None
    """Incremental text, kept only when text is read before the end (see the module docstring)."""
    num_sent_tokens: int = 0
    """DELTA: token ids (and logprobs) already handed out."""
    num_sent_chars: int = 0
    """DELTA: characters of text already handed out."""
    sent_finished: bool = False
    """DELTA: its finish_reason has been handed out."""
    final_text: str | None = None
    """Text decoded in one go at finish (no detokenizer)."""


@dataclass
class _Group:
    """A user request and its n completions."""

    prompt: str | None
    prompt_token_ids: list[int]
    kind: RequestOutputKind
    completions: list[_Completion]

    @property
    def finished(self) -> bool:
        return all(c.request.finished for c in self.completions)


class OutputProcessor:
    def __init__(self, tokenizer: Tokenizer | None) -> None:
        self.tokenizer = tokenizer
        self._groups: dict[str, _Group] = {}

    def add_request(self, request_id: str, prompt: str | None, children: list[Request], stream: bool = False) -> None:
        """Start following a user request. `stream`: a CUMULATIVE request whose text is read as it grows."""
        params = children[0].params
        incremental = stream or bool(params.stop) or params.output_kind is RequestOutputKind.DELTA
        completions = [_Completion(c, self._detokenizer(c) if incremental else None) for c in children]
        self._groups[request_id] = _Group(prompt, children[0].prompt_token_ids, params.output_kind, completions)

    def detokenize(self, request: Request) -> str | None:
        """Decode a completion's newest token; return the stop string it completed, if any."""
        completion = self._groups[request.parent_id].completions[request.index]  # type: ignore[index]
        detokenizer = completion.detokenizer
        if detokenizer is None:
            return None
        stop = detokenizer.add_token(request.output_token_ids[-1])
        if stop is None and request.finished:
            detokenizer.flush()
        return stop

    def make_outputs(self, updated: list[Request]) -> list[RequestOutput]:
        """One output per user request among `updated` that has something to report, in order."""
        touched = dict.fromkeys(r.parent_id for r in updated)
        outputs = []
        for request_id in touched:
            group = self._groups.get(request_id)  # type: ignore[arg-type]
            if group is None or (group.kind is RequestOutputKind.FINAL_ONLY and not group.finished):
                continue
            outputs.append(self._output(request_id, group))  # type: ignore[arg-type]
        return outputs

    def abort(self, request_id: str) -> RequestOutput | None:
        """The last output of a request whose completions the core has just aborted; None if unknown."""
        group = self._groups.get(request_id)
        return None if group is None else self._output(request_id, group)

    def drop(self, request_id: str) -> None:
        self._groups.pop(request_id, None)

    # ----------------------------------------------------------------- building
    def _output(self, request_id: str, group: _Group) -> RequestOutput:
        # built once per request per step while streaming: the one-completion case skips the merging
        completions = group.completions
        if group.kind is RequestOutputKind.DELTA:
            outputs = [o for o in map(self._delta, completions) if o is not None]
        else:
            outputs = [self._cumulative(c) for c in completions]
        if len(completions) == 1:
            request = completions[0].request
            finished = request.finished
            metrics = RequestMetrics(
                arrival_time=request.arrival_time,
                first_token_time=request.first_token_time or None,
                finished_time=(request.finished_time or 0.0) if finished else None,
                num_preemptions=request.num_preemptions,
                first_scheduled_time=request.first_scheduled_time or None,
            )
            num_cached, error = request.num_cached_tokens, request.error
        else:
            finished = group.finished
            children = [c.request for c in completions]
            metrics = _metrics(children, finished)
            num_cached = children[0].num_cached_tokens
            error = next((c.error for c in children if c.error is not None), None)
        if finished:
            del self._groups[request_id]
        return RequestOutput(
            request_id=request_id,
            prompt=group.prompt,
            prompt_token_ids=group.prompt_token_ids,
            outputs=outputs,
            finished=finished,
            num_cached_tokens=num_cached,
            metrics=metrics,
            error=error,
        )

    def _cumulative(self, completion: _Completion) -> CompletionOutput:
        request = completion.request
        return CompletionOutput(
            index=request.index,
            text=self._text(completion),
            token_ids=list(request.output_token_ids),
            logprobs=list(request.logprobs) if request.params.logprobs is not None else None,
            finish_reason=request.finish_reason,
            stop_reason=request.stop_reason,
        )

    def _delta(self, completion: _Completion) -> CompletionOutput | None:
        """What is new in a completion since its last output; None when nothing is."""
        request = completion.request
        num_sent, num_tokens = completion.num_sent_tokens, len(request.output_token_ids)
        finish_reason = request.finish_reason  # read once: each read is a few property calls
        finished = finish_reason is not None
        newly_finished = finished and not completion.sent_finished
        if num_tokens == num_sent and not newly_finished:
            return None
        text = self._text(completion, finished)
        delta_text = text[completion.num_sent_chars :]
        completion.num_sent_tokens, completion.num_sent_chars = num_tokens, len(text)
        completion.sent_finished = finished
        return CompletionOutput(
            index=request.index,
            text=delta_text,
            token_ids=request.output_token_ids[num_sent:],
            logprobs=request.logprobs[num_sent:] if request.params.logprobs is not None else None,
            finish_reason=finish_reason,
            stop_reason=request.stop_reason,
        )

    def _text(self, completion: _Completion, finished: bool | None = None) -> str:
        request = completion.request
        if finished is None:
            finished = request.finished
        if completion.detokenizer is not None:
            return completion.detokenizer.visible_text(finished)
        if not finished or self.tokenizer is None or not request.params.detokenize:
            return ""
        if completion.final_text is None:
            completion.final_text = self.tokenizer.decode(
                request.output_token_ids, skip_special_tokens=request.params.skip_special_tokens
            )
        return completion.final_text

    def _detokenizer(self, request: Request) -> IncrementalDetokenizer | None:
        if self.tokenizer is None or not request.params.detokenize:
            return None
        return IncrementalDetokenizer(self.tokenizer, request.prompt_token_ids, request.params)


def _metrics(children: list[Request], finished: bool) -> RequestMetrics:
    firsts = [c.first_token_time for c in children if c.first_token_time]
    return RequestMetrics(
        arrival_time=children[0].arrival_time,
        first_token_time=min(firsts) if firsts else None,
        finished_time=max((c.finished_time or 0.0) for c in children) if finished else None,
        num_preemptions=sum(c.num_preemptions for c in children),
        first_scheduled_time=min((c.first_scheduled_time for c in children if c.first_scheduled_time), default=None),
    )
