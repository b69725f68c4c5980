"""LLMEngine: the offline engine, everything in one thread: add requests, step, abort.

A step is the core's step (engine/core.py: schedule, launch, collect, update) followed by the
frontend's work on its rows (engine/output_processor.py: text, stop strings, output shapes). It is
the same code `mopt serve` runs, with the core in another process and the frontend on the event
loop (async_engine.py); here the CoreOutputs pass by reference instead of through a socket.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from model_optimizer.runtime.config import EngineConfig
from model_optimizer.runtime.engine.core import EngineCore, ModelInfo, StepRunner
from model_optimizer.runtime.engine.input_processor import InputProcessor
from model_optimizer.runtime.engine.messages import EngineStats
from model_optimizer.runtime.engine.output_processor import OutputProcessor
from model_optimizer.runtime.engine.outputs import RequestOutput
from model_optimizer.runtime.sampling_params import SamplingParams

__all__ = ["EngineStats", "LLMEngine", "ModelInfo", "StepRunner"]


class LLMEngine:
    def __init__(self, config: EngineConfig, runner: StepRunner, tokenizer: Any, info: ModelInfo) -> None:
        self.config = config
        self.runner = runner
        self.tokenizer = tokenizer
        self.info = info
        self.core = EngineCore(config, runner, info, tokenizer=tokenizer)
        self.inputs = InputProcessor(tokenizer, info.vocab_size, self.core.limits)
        self.output_processor = OutputProcessor(tokenizer)

    @property
    def scheduler(self):  # noqa: ANN201 - the core's, for tests and stats
        return self.core.scheduler

    @property
    def kv_cache(self):  # noqa: ANN201
        return self.core.kv_cache

    @property
    def num_steps(self) -> int:
        return self.core.num_steps

    @property
    def num_generation_tokens(self) -> int:
        return self.core.num_generation_tokens

    def close(self) -> None:
        """Stop the core's runner workers and grammar threads (EngineCore.close); no steps afterwards."""
        self.core.close()

    # ----------------------------------------------------------------- requests
    def add_request(
        self,
        request_id: str,
        prompt: str | list[int],
        params: SamplingParams | None = None,
        priority: int = 0,
        arrival_time: float | None = None,
        stream: bool = False,
    ) -> None:
        """Queue a request. Raises ValueError when it is malformed or could never fit.

        `params.output_kind` says what each output holds (see RequestOutputKind). `stream` matters
        only for CUMULATIVE: text is decoded as tokens arrive instead of once at finish.
        """
        params = params or SamplingParams()
        if self.output_processor.has(request_id):
            raise ValueError(f"request id {request_id!r} is already in use")
        request = self.inputs.request(request_id, prompt, params, priority, arrival_time)
        self.core.add_request(request)
        text = prompt if isinstance(prompt, str) else None
        self.output_processor.add_request(
            request_id, text, request.prompt_token_ids, params, request.arrival_time, stream
        )

    def abort(self, request_id: str) -> RequestOutput | None:
        """Drop a request (all its completions) and free its blocks now; returns its last output
        (finish_reason 'abort' on the completions still running), or None for an unknown id."""
        self.core.abort([request_id])
        return self.output_processor.abort(request_id)

    def abort_request(self, request_ids: str | Iterable[str]) -> None:
        """vLLM's LLMEngine.abort_request: `abort` each of `request_ids` (one id or several)."""
        for request_id in [request_ids] if isinstance(request_ids, str) else list(request_ids):
            self.abort(request_id)

    def get_tokenizer(self) -> Any:
        """The tokenizer the engine was given (vLLM's LLMEngine.get_tokenizer)."""
        return self.tokenizer

    def has_unfinished_requests(self) -> bool:
        return self.core.has_unfinished_requests()

    def reset_prefix_cache(self) -> bool:
        """vLLM's LLMEngine.reset_prefix_cache: the core's (EngineCore.reset_prefix_cache), between steps."""
        return self.core.reset_prefix_cache()

    # ----------------------------------------------------------------- step
    def step(self) -> list[RequestOutput]:
        """Run one batch; return an output for every request with something to report."""
        outputs, stopped = self.output_processor.process(self.core.step()[0])
        if stopped:  # stop strings found in the text: the core drops them before the next step
            self.core.abort(stopped)
        return outputs

    def stats(self) -> EngineStats:
        return self.core.stats()
