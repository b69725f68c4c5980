"""POST /v1/completions: text, texts, token ids or lists of token ids; streamed over SSE or not."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse, Response

from model_optimizer.engine.async_engine import EngineDeadError
from model_optimizer.engine.outputs import RequestOutput
from model_optimizer.server.errors import APIError, error_body, error_response
from model_optimizer.server.generation import (
    ClientDisconnected,
    GroupStreamingResponse,
    RequestGroup,
    failure,
    until_disconnect,
)
from model_optimizer.server.params import check_caps, resolve_max_tokens, sampling_params
from model_optimizer.server.prompts import Prompt, prompt_list, tokenize_prompts
from model_optimizer.server.protocol import CompletionChoice, CompletionRequest, CompletionResponse
from model_optimizer.server.render import DONE, DeltaTracker, TokenTexts, completion_logprobs, sse, usage
from model_optimizer.server.routes import ERROR_RESPONSES
from model_optimizer.server.state import ServerState, get_state

router = APIRouter()
logger = logging.getLogger(__name__)


@router.post("/v1/completions", response_model=CompletionResponse, responses=ERROR_RESPONSES)
async def create_completion(body: CompletionRequest, request: Request) -> Response:
    state = get_state(request)
    state.check_model(body.model)
    state.check_accepting()
    state.check_generates()
    if body.suffix:
        raise APIError(400, "suffix is not supported", "suffix")
    if body.best_of is not None and body.best_of != body.n:
        raise APIError(400, "best_of different from n is not supported", "best_of")
    if body.echo and body.logprobs is not None:
        raise APIError(400, "echo together with logprobs needs prompt logprobs, which are not supported", "echo")
    if body.echo and state.tokenizer is None:
        raise APIError(400, "echo needs the prompt as text, and this model has no tokenizer", "echo")
    stop = check_caps(state, body, body.logprobs)
    prompts = await tokenize_prompts(state, prompt_list(body.prompt))
    params = [
        sampling_params(
            body,
            stop,
            resolve_max_tokens(state, body.max_tokens, len(p.token_ids)),
            body.logprobs,
            state.sampling_defaults,
        )
        for p in prompts
    ]
    echo = [await _echo_text(state, p) if body.echo else "" for p in prompts]
    group: RequestGroup | None = RequestGroup(state, "cmpl")
    try:
        await group.start([p.token_ids for p in prompts], params, body.priority, body.stream)
        if body.stream:
            response = GroupStreamingResponse(_stream(state, body, prompts, echo, group), group)
            group = None  # the response closes it
            return response
        finals = await until_disconnect(request, group.final_outputs())
        error = next((e for e in map(failure, finals) if e), None)
        if error:
            return error_response(500, error)
        return JSONResponse(_response(state, body, prompts, echo, group.request_id, finals).model_dump())
    except ClientDisconnected:
        return Response(status_code=499)
    except EngineDeadError as exc:
        return error_response(500, str(exc))
    finally:
        if group is not None:
            group.close()


async def _echo_text(state: ServerState, prompt: Prompt) -> str:
    if prompt.text is not None:
        return prompt.text
    return await state.run_blocking(state.tokenizer.decode, prompt.token_ids)


def _response(
    state: ServerState,
    body: CompletionRequest,
    prompts: list[Prompt],
    echo: list[str],
    request_id: str,
    finals: list[RequestOutput],
) -> CompletionResponse:
    texts = TokenTexts(state.tokenizer)
    choices = []
    for i, output in enumerate(finals):
        for c in output.outputs:
            logprobs = None
            if c.logprobs is not None:
                logprobs = completion_logprobs(texts, c.logprobs, len(echo[i]), body.logprobs or 0)
            choices.append(
                CompletionChoice(
                    index=i * body.n + c.index,
                    text=echo[i] + c.text,
                    logprobs=logprobs,
                    finish_reason=c.finish_reason,
                    stop_reason=c.stop_reason,
                )
            )
    return CompletionResponse(
        id=request_id, model=state.model_name, choices=choices, usage=usage([len(p.token_ids) for p in prompts], finals)
    )


async def _stream(
    state: ServerState, body: CompletionRequest, prompts: list[Prompt], echo: list[str], group: RequestGroup
) -> AsyncIterator[str]:
    texts = TokenTexts(state.tokenizer)
    tracker = DeltaTracker()
    last: list[RequestOutput | None] = [None] * len(prompts)
    base = CompletionResponse(id=group.request_id, model=state.model_name, choices=[])
    try:
        async for i, output in group.outputs():
            last[i] = output
            error = failure(output)
            if error:
                yield sse(error_body(500, error))
                break
            choices = []
            for c in output.outputs:
                index = i * body.n + c.index
                delta = tracker.delta(index, c)
                if delta is None:
                    continue
                prefix = echo[i] if delta.first else ""
                logprobs = None
                if delta.logprobs is not None:
                    offset = len(echo[i]) + delta.text_offset
                    logprobs = completion_logprobs(texts, delta.logprobs, offset, body.logprobs or 0)
                choices.append(
                    CompletionChoice(
                        index=index,
                        text=prefix + delta.text,
                        logprobs=logprobs,
                        finish_reason=c.finish_reason,
                        stop_reason=c.stop_reason,
                    )
                )
            if choices:
                yield sse(base.model_copy(update={"choices": choices}))
        else:
            if body.stream_options and body.stream_options.include_usage:
                yield sse(base.model_copy(update={"usage": usage([len(p.token_ids) for p in prompts], last)}))
    except EngineDeadError as exc:
        yield sse(error_body(500, str(exc)))
    except Exception as exc:  # noqa: BLE001 - headers are sent: the client learns of it in-band, then [DONE]
        logger.exception("completion stream %s failed", group.request_id)
        yield sse(error_body(500, f"internal error: {type(exc).__name__}"))
    yield DONE
