"""One prompt's beam search (use_beam_search) on the async engine, read as a request's stream is read.

Each step adds one engine request per live beam (a single token with its alternatives) and waits for
them all; the search's answer comes as one final output holding the best beams as its completions, so
the routes render it, streamed or not, as they render sampled completions. Leaving early aborts the
step's requests.

Its num_cached_tokens is what the prefix cache served of the prompt at the first step, the one request whose
prompt is the request's: usage counts the prompt once, so its cached tokens are counted once too (every
later step re-sends the prompt with a beam, and finds it cached as a matter of course).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator

from model_optimizer.runtime.beam_search import BeamSearch, BeamSearchParams
from model_optimizer.runtime.engine.async_engine import AsyncEngine, RequestStream
from model_optimizer.runtime.engine.outputs import CompletionOutput, RequestMetrics, RequestOutput
from model_optimizer.runtime.sampling_params import RequestOutputKind
from model_optimizer.runtime.server.state import ServedModel


class BeamStream:
    """A beam search as RequestGroup reads an engine request: iterate it for its (one) output; `finished`,
    `aborted`, `kind`, `request_id` and `engine` as a RequestStream has them."""

    def __init__(
        self,
        engine: AsyncEngine,
        model: ServedModel,
        request_id: str,
        prompt_token_ids: list[int],
        params: BeamSearchParams,
        priority: int,
        stream: bool,
        max_len: int,
    ) -> None:
        """`max_len`: the longest a beam may grow (the context, or less where each step's prompt must fit a
        step's token budget: chunked prefill off)."""
        self.search = BeamSearch(prompt_token_ids, params, model.eos_token_ids, max_len)  # ValueError
        self.engine = engine
        self.request_id = request_id
        self.prompt_token_ids = prompt_token_ids
        self.tokenizer = model.tokenizer
        self.priority = priority
        self.kind = RequestOutputKind.DELTA if stream else RequestOutputKind.FINAL_ONLY
        self.finished = False
        self.aborted = False
        self.num_cached_tokens = 0
        """The prompt's tokens the prefix cache served (the first step's request's)."""
        self._steps: list[RequestStream] = []

    async def __aiter__(self) -> AsyncIterator[RequestOutput]:
        times = RequestMetrics(arrival_time=time.time())
        step_params = self.search.params.step_params()
        aborts_all = self.engine.aborts_all
        try:
            while not self.aborted and (pending := self.search.pending()):
                if self.engine.aborts_all != aborts_all:  # a drain out of time, between two steps
                    self.finished = True
                    yield self._output([], times, None, "abort")
                    return
                step = self.search.num_steps
                self._steps = []  # each one as it is added: leaving early aborts those already added
                try:
                    for i, ids in enumerate(pending):
                        request_id = f"{self.request_id}-s{step}b{i}"
                        self._steps.append(
                            await self.engine.add_request(request_id, ids, step_params, self.priority, False)
                        )
                except ValueError as exc:  # the engine refuses a beam it could take at the start (never, but say so)
                    self.finished = True
                    yield self._output([], times, f"beam search stopped at step {step}: {exc}", "error")
                    return
                finals = await asyncio.gather(*(_final(s) for s in self._steps))
                if times.first_token_time is None:
                    self.num_cached_tokens = finals[0].num_cached_tokens
                    times.first_scheduled_time = min(
                        f.metrics.first_scheduled_time or times.arrival_time for f in finals
                    )
                    times.first_token_time = time.time()
                if failed := next((f for f in finals if f.error), None):
                    self.finished = True
                    yield self._output([], times, failed.error, "error")
                    return
                if any(not f.outputs[0].token_ids for f in finals):  # a step aborted (a drain out of time, a stop)
                    self.finished = True
                    yield self._output([], times, None, "abort")
                    return
                self.search.advance([f.outputs[0].logprobs[0] for f in finals])
            if self.aborted:
                return
            self.finished = True
            yield self._output(self.search.result(self.tokenizer).sequences, times)
        finally:
            self.engine.abort_streams(self._steps)

    def _output(
        self, sequences: list, times: RequestMetrics, error: str | None = None, ended: str | None = None
    ) -> RequestOutput:
        """The search's one output: its best beams as completions, or, when it `ended` ("error", "abort"),
        beam_width empty completions that say so."""
        times.finished_time = time.time()
        outputs = [
            CompletionOutput(i, s.text or "", self.search.output_ids(s), None, s.finish_reason, s.stop_reason)
            for i, s in enumerate(sequences)
        ]
        if ended is not None:
            outputs = [CompletionOutput(i, "", [], None, ended) for i in range(self.search.params.beam_width)]
        return RequestOutput(
            self.request_id, None, self.prompt_token_ids, outputs, True, self.num_cached_tokens, times, error
        )


async def _final(stream: RequestStream) -> RequestOutput:
    last = None
    async for output in stream:
        last = output
    assert last is not None  # a stream ends with its final output, or raises
    return last
