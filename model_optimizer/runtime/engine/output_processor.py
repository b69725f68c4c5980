"""After the core: the rows of each CoreOutputs become the outputs callers asked for.

The core (scheduler and runner) appends token ids and applies the token-level stops (EOS, stop token
ids, length). Everything else happens here, in the frontend, once per completion that got news:
incremental detokenizing, stop strings (a completion that hits one is finished here, and its id
handed back so the core can be told to drop it), merging a request's n completions into one
RequestOutput, and shaping that output by the request's RequestOutputKind:

- CUMULATIVE copies every completion's tokens so far (what a caller asking for snapshots wants);
- DELTA hands out only what is new since the request's last output, so a stream of any length
  costs each token once;
- FINAL_ONLY builds one output, when all n completions have finished.

Text is decoded as tokens arrive only when someone reads it before the end (DELTA, a streaming
CUMULATIVE request, or stop strings to look for); otherwise once, at finish. Logprobs of a request that
detokenizes are handed out able to name their tokens (vLLM's decoded_token), decoded when read.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from model_optimizer.runtime.engine.detokenizer import (
    IncrementalDetokenizer,
    TokenTexts,
    decoded_after,
    prompt_context,
)
from model_optimizer.runtime.engine.input_processor import Tokenizer
from model_optimizer.runtime.engine.logprob_list import LogprobList
from model_optimizer.runtime.engine.messages import CoreOutputs, read_rows
from model_optimizer.runtime.engine.outputs import CompletionOutput, RequestMetrics, RequestOutput
from model_optimizer.runtime.sampler_output import Logprob, TokenText
from model_optimizer.runtime.sampling_params import RequestOutputKind, SamplingParams


@dataclass(eq=False)
class _Completion:
    """What the frontend knows of one completion, and what it has told the caller so far."""

    index: int
    params: SamplingParams
    detokenizer: IncrementalDetokenizer | None
    """Incremental text, kept only when text is read before the end (see the module docstring)."""
    texts: TokenText | None = None
    """Names its logprobs' tokens (decoded_token) when it detokenizes and there is a tokenizer."""
    token_ids: list[int] = field(default_factory=list)
    logprobs: LogprobList = field(default_factory=LogprobList)
    """Logprobs of its tokens (when asked for), as columns: all of them, or (DELTA) those not handed out yet."""
    finish_reason: str | None = None
    stop_reason: int | str | None = None
    error: str | None = None
    num_cached_tokens: int = 0
    num_preemptions: int = 0
    first_scheduled_time: float | None = None
    first_token_time: float | None = None
    finished_time: float | None = None
    num_sent_tokens: int = 0
    """DELTA: token ids (and logprobs) already handed out."""
    num_sent_chars: int = 0
    """DELTA: characters of text already handed out."""
    sent_finished: bool = False
    """DELTA: its finish_reason has been handed out."""
    num_silent: int = 0
    """Last tokens left out of the text: 1 when the token that ended it is (Finish.on_token)."""
    final_text: str | None = None
    """Text decoded in one go at finish (no detokenizer)."""
    context: list[int] = field(default_factory=list)
    """The prompt's last tokens, that text decoded in one go reads after (no detokenizer)."""

    @property
    def finished(self) -> bool:
        return self.finish_reason is not None

    def finish(self, reason: str, stop_reason: int | str | None = None, error: str | None = None) -> None:
        """End it. Text held back as an incomplete character is added, unless a stop string (`reason`
        'stop' with a str stop_reason) ended it: the text was cut there. A stop string in the text added
        is cut too, and is then what ended it."""
        if self.detokenizer is not None and not isinstance(stop_reason, str):
            stop = self.detokenizer.flush()
            if stop is not None and reason != "error":
                reason, stop_reason = "stop", stop
        self.finish_reason, self.stop_reason, self.error = reason, stop_reason, error
        self.finished_time = time.time()


@dataclass(eq=False)
class _Group:
    """A request and its n completions."""

    prompt: str | None
    prompt_token_ids: list[int]
    kind: RequestOutputKind
    arrival_time: float
    completions: list[_Completion]
    prompt_logprobs: list[dict[int, Logprob] | None] | None = None
    """Prompt logprobs so far, when asked for (None first, then one dict per scored prompt token)."""
    num_sent_prompt_logprobs: int = 0
    """DELTA: prompt logprobs already handed out."""

    @property
    def finished(self) -> bool:
        return all(c.finished for c in self.completions)


class OutputProcessor:
    def __init__(self, tokenizer: Tokenizer | None, stream_interval: int = 1) -> None:
        self.tokenizer = tokenizer
        self.stream_interval = stream_interval
        """DELTA outputs wait until a completion has this many new tokens (its first token and its finish
        go at once): fewer, larger outputs for a streaming server (vLLM's --stream-interval)."""
        self.texts = None if tokenizer is None else TokenTexts(tokenizer)
        """Token texts of logprobs, cached across requests (the rule and cache the server's logprobs use)."""
        self._groups: dict[str, _Group] = {}

    def add_request(
        self,
        request_id: str,
        prompt: str | None,
        prompt_token_ids: list[int],
        params: SamplingParams,
        arrival_time: float,
        stream: bool = False,
    ) -> None:
        """Start following a request. `stream`: a CUMULATIVE request whose text is read as it grows."""
        if request_id in self._groups:
            raise ValueError(f"request id {request_id!r} is already in use")
        incremental = stream or bool(params.stop) or params.output_kind is RequestOutputKind.DELTA
        completions = []
        for index in range(params.n):
            child = params.for_completion(index)
            detokenizer = self._detokenizer(prompt_token_ids, child) if incremental else None
            context = [] if incremental or self.tokenizer is None else self._context(prompt_token_ids, child)
            texts = self.texts if child.detokenize else None
            completions.append(_Completion(index, child, detokenizer, texts, context=context))
        group = _Group(prompt, prompt_token_ids, params.output_kind, arrival_time, completions)
        if params.prompt_logprobs is not None:
            group.prompt_logprobs = [None]
        self._groups[request_id] = group

    def has(self, request_id: str) -> bool:
        return request_id in self._groups

    @property
    def num_requests(self) -> int:
        return len(self._groups)

    def process(self, out: CoreOutputs) -> tuple[list[RequestOutput], list[str]]:
        """Apply a core step's rows. Returns an output per request with something to report (in row
        order) and the completions a stop string finished, as ids for CoreAbort (`index:id` when n > 1)."""
        rows = read_rows(out)
        groups = self._groups
        for part in out.prompt_logprobs:  # no output of their own: they go out with the request's next one
            group = groups.get(part.request_id)
            if group is not None and group.prompt_logprobs is not None:
                group.prompt_logprobs += _named(part.positions(), group.completions[0].texts)
        for s in out.started:
            request_id, index = rows[s.row][0], rows[s.row][1]
            group = groups.get(request_id)
            if group is not None:
                completion = group.completions[index]
                completion.num_cached_tokens, completion.first_scheduled_time = s.num_cached_tokens, s.time
        finishes = {f.row: f for f in out.finished} if out.finished else None
        touched: dict[str, _Group] = {}
        stopped: list[str] = []
        for i, (request_id, index, token_ids, logprobs) in enumerate(rows):
            group = groups.get(request_id)
            if group is None:
                continue
            completion = group.completions[index]
            if completion.finish_reason is not None:  # a stop string finished it here: later news is moot
                continue
            touched[request_id] = group
            finish = finishes.get(i) if finishes else None
            silent = finish is not None and finish.on_token and not completion.params.include_stop_str_in_output
            if token_ids and self._add_tokens(completion, token_ids, logprobs, silent):
                stopped.append(request_id if len(group.completions) == 1 else f"{index}:{request_id}")
                continue
            if finish is not None:
                completion.num_preemptions = finish.num_preemptions
                completion.finish(finish.reason, finish.stop_reason, finish.error)
        outputs = []
        for request_id, group in touched.items():
            if group.kind is RequestOutputKind.FINAL_ONLY and not group.finished:
                continue
            if group.kind is RequestOutputKind.DELTA and self.stream_interval > 1 and not self._due(group):
                continue
            outputs.append(self._output(request_id, group))
        return outputs, stopped

    def _due(self, group: _Group) -> bool:
        """Whether a DELTA request's news goes out now under the stream interval."""
        for c in group.completions:
            num_new = len(c.token_ids) - c.num_sent_tokens
            if (c.finished and not c.sent_finished) or (
                num_new and (c.num_sent_tokens == 0 or num_new >= self.stream_interval)
            ):
                return True
        return False

    def abort(self, request_id: str) -> RequestOutput | None:
        """The last output of a request being dropped (its unfinished completions end with 'abort');
        None if unknown. The request is forgotten."""
        group = self._groups.get(request_id)
        if group is None:
            return None
        for completion in group.completions:
            if not completion.finished:
                completion.finish("abort")
        return self._output(request_id, group)

    def _add_tokens(
        self, completion: _Completion, token_ids: list[int], logprobs: LogprobList | None, silent_last: bool = False
    ) -> bool:
        """Append a row's tokens; True when a stop string ends the completion (later tokens are dropped).
        `silent_last`: the last token ended the completion and stays out of its text (Finish.on_token)."""
        if completion.first_token_time is None:
            completion.first_token_time = time.time()
        if silent_last:
            completion.num_silent = 1
        detokenizer = completion.detokenizer
        if detokenizer is not None:
            for k, token_id in enumerate(token_ids[:-1] if silent_last else token_ids):
                stop = detokenizer.add_token(token_id)
                if stop is not None:
                    completion.token_ids += token_ids[: k + 1]
                    if logprobs is not None:
                        _add_logprobs(completion, logprobs[: k + 1])
                    completion.finish("stop", stop)
                    return True
        completion.token_ids += token_ids
        if logprobs is not None:
            _add_logprobs(completion, logprobs)
        return False

    # ----------------------------------------------------------------- building
    def _output(self, request_id: str, group: _Group) -> RequestOutput:
        # built once per request per step while streaming: the one-completion case skips the merging
        completions = group.completions
        if group.kind is RequestOutputKind.DELTA:
            outputs = [o for o in map(self._delta, completions) if o is not None]
        else:
            outputs = [self._cumulative(c) for c in completions]
        finished = group.finished
        if finished:
            del self._groups[request_id]
        return RequestOutput(
            request_id=request_id,
            prompt=group.prompt,
            prompt_token_ids=group.prompt_token_ids,
            outputs=outputs,
            finished=finished,
            num_cached_tokens=completions[0].num_cached_tokens,
            metrics=_metrics(group, finished),
            error=completions[0].error if len(completions) == 1 else _first_error(completions),
            prompt_logprobs=self._prompt_logprobs(group),
        )

    @staticmethod
    def _prompt_logprobs(group: _Group) -> list[dict[int, Logprob] | None] | None:
        if group.prompt_logprobs is None:
            return None
        if group.kind is not RequestOutputKind.DELTA:
            return list(group.prompt_logprobs)
        sent, group.num_sent_prompt_logprobs = group.num_sent_prompt_logprobs, len(group.prompt_logprobs)
        return group.prompt_logprobs[sent:]

    def _cumulative(self, completion: _Completion) -> CompletionOutput:
        return CompletionOutput(
            index=completion.index,
            text=self._text(completion),
            token_ids=list(completion.token_ids),
            logprobs=completion.logprobs.copy() if completion.params.logprobs is not None else None,
            finish_reason=completion.finish_reason,
            stop_reason=completion.stop_reason,
        )

    def _delta(self, completion: _Completion) -> CompletionOutput | None:
        """What is new in a completion since its last output; None when nothing is."""
        num_sent, num_tokens = completion.num_sent_tokens, len(completion.token_ids)
        finish_reason = completion.finish_reason
        finished = finish_reason is not None
        if num_tokens == num_sent and not (finished and not completion.sent_finished):
            return None
        text = self._text(completion)
        delta_text = text[completion.num_sent_chars :]
        completion.num_sent_tokens, completion.num_sent_chars = num_tokens, len(text)
        completion.sent_finished = finished
        logprobs = None
        if completion.params.logprobs is not None:  # those not handed out yet: hand them over
            logprobs = completion.logprobs if len(completion.logprobs) else LogprobList()  # never the shared one
            completion.logprobs = _NO_LOGPROBS
        return CompletionOutput(
            index=completion.index,
            text=delta_text,
            token_ids=completion.token_ids[num_sent:],
            logprobs=logprobs,
            finish_reason=finish_reason,
            stop_reason=completion.stop_reason,
        )

    def _text(self, completion: _Completion) -> str:
        finished = completion.finished
        if completion.detokenizer is not None:
            return completion.detokenizer.visible_text(finished)
        if not finished or self.tokenizer is None or not completion.params.detokenize:
            return ""
        if completion.final_text is None:
            skip = completion.params.skip_special_tokens
            spoken = completion.token_ids[: len(completion.token_ids) - completion.num_silent]
            completion.final_text = decoded_after(self.tokenizer, completion.context, spoken, skip)
        return completion.final_text

    def _context(self, prompt_token_ids: list[int], params: SamplingParams) -> list[int]:
        """The prompt's last tokens that text decoded at finish reads after (none when there is no text)."""
        if not params.detokenize:
            return []
        return prompt_context(self.tokenizer, prompt_token_ids, params.skip_special_tokens)  # type: ignore[arg-type]

    def _detokenizer(self, prompt_token_ids: list[int], params: SamplingParams) -> IncrementalDetokenizer | None:
        if self.tokenizer is None or not params.detokenize:
            return None
        return IncrementalDetokenizer(self.tokenizer, prompt_token_ids, params)


_NO_LOGPROBS = LogprobList()
"""What a DELTA completion holds once its logprobs are handed out; never extended (see _add_logprobs)
nor handed out."""


def _add_logprobs(completion: _Completion, logprobs: LogprobList) -> None:
    """Append a row's logprobs. A completion holding none takes the row's columns as they are (they are
    the row's own: read_rows slices them), so a stream of one token per step copies nothing, and names
    their tokens as the completion does."""
    if len(completion.logprobs):
        completion.logprobs.extend(logprobs)
    else:
        logprobs.texts = completion.texts
        completion.logprobs = logprobs


def _named(positions: list[dict[int, Logprob]], texts: TokenText | None) -> list[dict[int, Logprob]]:
    """Prompt logprobs that answer decoded_token, for a request that detokenizes (n completions share it)."""
    if texts is not None:
        for entry in positions:
            for lp in entry.values():
                lp.texts = texts
    return positions


def _first_error(completions: list[_Completion]) -> str | None:
    return next((c.error for c in completions if c.error is not None), None)


def _metrics(group: _Group, finished: bool) -> RequestMetrics:
    completions = group.completions
    if len(completions) == 1:
        c = completions[0]
        return RequestMetrics(
            arrival_time=group.arrival_time,
            first_token_time=c.first_token_time,
            finished_time=c.finished_time if finished else None,
            num_preemptions=c.num_preemptions,
            first_scheduled_time=c.first_scheduled_time,
        )
    firsts = [c.first_token_time for c in completions if c.first_token_time]
    return RequestMetrics(
        arrival_time=group.arrival_time,
        first_token_time=min(firsts) if firsts else None,
        finished_time=max((c.finished_time or 0.0) for c in completions) if finished else None,
        num_preemptions=sum(c.num_preemptions for c in completions),
        first_scheduled_time=min((c.first_scheduled_time for c in completions if c.first_scheduled_time), default=None),
    )
