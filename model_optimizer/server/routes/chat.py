"""POST /v1/chat/completions: messages through the chat template; streamed deltas start with the role."""

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
from model_optimizer.server.prompts import chat_prompt
from model_optimizer.server.protocol import (
    ChatChoice,
    ChatCompletionChunk,
    ChatCompletionRequest,
    ChatCompletionResponse,
    ChatResponseMessage,
    ChatStreamChoice,
    DeltaMessage,
)
from model_optimizer.server.render import DONE, DeltaTracker, TokenTexts, chat_logprobs, sse, usage
from model_optimizer.server.routes import ERROR_RESPONSES
from model_optimizer.server.state import ServerState, get_state

router = APIRouter()
logger = logging.getLogger(__name__)


@router.post("/v1/chat/completions", response_model=ChatCompletionResponse, responses=ERROR_RESPONSES)
async def create_chat_completion(body: ChatCompletionRequest, request: Request) -> Response:
    state = get_state(request)
    state.check_model(body.model)
    state.check_accepting()
    state.check_generates()
    unsupported = body.unsupported_field()
    if unsupported:
        raise APIError(
            400, f"{unsupported} is not supported by this server (no tool calls or structured output yet)", unsupported
        )
    num_top = body.top_logprobs or 0
    logprobs = num_top if body.logprobs else None
    stop = check_caps(state, body, logprobs if logprobs is not None else body.top_logprobs)
    prompt = await chat_prompt(state, body.messages, body.add_generation_prompt, body.chat_template_kwargs)
    field = "max_completion_tokens" if body.max_completion_tokens is not None else "max_tokens"
    requested = getattr(body, field)
    max_tokens = resolve_max_tokens(state, requested, len(prompt.token_ids), field)
    params = sampling_params(body, stop, max_tokens, logprobs, state.sampling_defaults)
    group: RequestGroup | None = RequestGroup(state, "chatcmpl")
    try:
        await group.start([prompt.token_ids], [params], body.priority, body.stream)
        if body.stream:
            response = GroupStreamingResponse(_stream(state, body, len(prompt.token_ids), group), group)
            group = None  # the response closes it
            return response
        [final] = await until_disconnect(request, group.final_outputs())
        if failure(final):
            return error_response(500, failure(final))
        return JSONResponse(_response(state, body, len(prompt.token_ids), group.request_id, final).model_dump())
    except ClientDisconnected:
        return Response(status_code=499)
    except EngineDeadError as exc:
        return error_response(500, str(exc))
    finally:
        if group is not None:
            group.close()


def _response(
    state: ServerState, body: ChatCompletionRequest, num_prompt_tokens: int, request_id: str, final: RequestOutput
) -> ChatCompletionResponse:
    texts = TokenTexts(state.tokenizer)
    choices = []
    for c in final.outputs:
        logprobs = chat_logprobs(texts, c.logprobs, body.top_logprobs or 0) if c.logprobs is not None else None
        choices.append(
            ChatChoice(
                index=c.index,
                message=ChatResponseMessage(content=c.text),
                logprobs=logprobs,
                finish_reason=c.finish_reason,
                stop_reason=c.stop_reason,
            )
        )
    return ChatCompletionResponse(
        id=request_id, model=state.model_name, choices=choices, usage=usage([num_prompt_tokens], [final])
    )


async def _stream(
    state: ServerState, body: ChatCompletionRequest, num_prompt_tokens: int, group: RequestGroup
) -> AsyncIterator[str]:
    texts = TokenTexts(state.tokenizer)
    tracker = DeltaTracker()
    last: RequestOutput | None = None
    base = ChatCompletionChunk(id=group.request_id, model=state.model_name, choices=[])
    role = [ChatStreamChoice(index=i, delta=DeltaMessage(role="assistant", content="")) for i in range(body.n)]
    yield sse(base.model_copy(update={"choices": role}))
    try:
        async for _, output in group.outputs():
            last = output
            if failure(output):
                yield sse(error_body(500, failure(output)))
                break
            choices = []
            for c in output.outputs:
                delta = tracker.delta(c.index, c)
                if delta is None:
                    continue
                logprobs = None
                if delta.logprobs is not None:
                    logprobs = chat_logprobs(texts, delta.logprobs, body.top_logprobs or 0)
                content = DeltaMessage(content=delta.text) if delta.text or not c.finished else DeltaMessage()
                choices.append(
                    ChatStreamChoice(
                        index=c.index,
                        delta=content,
                        logprobs=logprobs,
                        finish_reason=c.finish_reason,
                        stop_reason=c.stop_reason,
                    )
                )
            if choices:
                yield sse(base.model_copy(update={"choices": choices}))
        else:
            if body.stream_options and body.stream_options.include_usage:
                yield sse(base.model_copy(update={"usage": usage([num_prompt_tokens], [last])}))
    except EngineDeadError as exc:
        yield sse(error_body(500, str(exc)))
    except Exception as exc:  # noqa: BLE001 - headers are sent: the client learns of it in-band, then [DONE]
        logger.exception("chat stream %s failed", group.request_id)
        yield sse(error_body(500, f"internal error: {type(exc).__name__}"))
    yield DONE
