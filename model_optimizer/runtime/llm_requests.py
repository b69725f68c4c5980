"""One offline call's requests run to completion: queued for their final outputs, the engine stepped until
every one has finished (progress through llm_progress.py), the outputs handed back in the call's order. Any
exception (Ctrl-C too) aborts the call's requests, so that the engine is left with nothing of it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from model_optimizer.runtime.engine.engine import LLMEngine
from model_optimizer.runtime.engine.outputs import RequestOutput
from model_optimizer.runtime.llm_inputs import Prompt
from model_optimizer.runtime.llm_progress import offline_progress
from model_optimizer.runtime.sampling_params import RequestOutputKind, SamplingParams

Request = tuple[str, Prompt, SamplingParams, int]
"""(request id, prompt, params, priority)."""

ARGUMENT_OF = {"LLM.chat": "messages"}
"""The argument a call's prompts came in, by the call's label, where it is not `prompts`: errors name a prompt
by it."""


def run_requests(
    engine: LLMEngine,
    requests: list[Request],
    use_tqdm: bool | Callable[..., Any],
    on_progress: Callable[[int, RequestOutput], None] | None,
    label: str,
) -> list[RequestOutput]:
    """The final output of every one of `requests`, in their order. `on_progress(index, output)` as each
    finishes; `label` (the call: "LLM.generate") begins the progress lines and names the argument in errors."""
    index_of = {request[0]: index for index, request in enumerate(requests)}
    added = []
    try:
        for index, request in enumerate(requests):
            name = f"{ARGUMENT_OF.get(label, 'prompts')}[{index}]" if len(requests) > 1 else ""
            _add_request(engine, request, name)
            added.append(request[0])
        finished: dict[str, RequestOutput] = {}
        with offline_progress(len(requests), use_tqdm, label) as advance:
            while engine.has_unfinished_requests():
                for output in engine.step():
                    if output.finished:
                        finished[output.request_id] = output
                        advance()
                        if on_progress:
                            on_progress(index_of[output.request_id], output)
    except BaseException:
        for request_id in added:
            engine.abort(request_id)
        raise
    return [finished[request_id] for request_id, *_ in requests]


def _add_request(engine: LLMEngine, request: Request, name: str) -> None:
    """Queue one request for its final output; the engine's ValueError (a prompt too long, say) starts with
    the prompt's `name` when one is given (`prompts[3]`, a chat's `messages[3]`): in a batch of thousands,
    which one it was."""
    request_id, prompt, params, priority = request
    try:
        engine.add_request(request_id, prompt, params.clone(output_kind=RequestOutputKind.FINAL_ONLY), priority)
    except ValueError as exc:
        if not name:
            raise
        raise ValueError(f"{name}: {exc}") from None
