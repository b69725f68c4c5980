"""POST /v1/chat/completions: messages through the chat template; streamed deltas start with the role."""

from __future__ import annotations

from fastapi import APIRouter, Request
from fastapi.responses import Response
from pydantic import BaseModel

from model_optimizer.runtime.engine.outputs import RequestOutput
from model_optimizer.runtime.server.body import ParsedBodyRoute
from model_optimizer.runtime.server.errors import APIError
from model_optimizer.runtime.server.logprobs import TokenTexts, chat_logprobs, chat_logprobs_dict
from model_optimizer.runtime.server.prompts import chat_prompt
from model_optimizer.runtime.server.protocol import (
    ChatChoice,
    ChatCompletionChunk,
    ChatCompletionRequest,
    ChatCompletionResponse,
    ChatResponseMessage,
    ChatStreamChoice,
    DeltaMessage,
    UsageInfo,
)
from model_optimizer.runtime.server.request_group import Generation, new_request_id, respond
from model_optimizer.runtime.server.routes import ERROR_RESPONSES
from model_optimizer.runtime.server.sampling import check_caps, resolve_max_tokens, sampling_params
from model_optimizer.runtime.server.state import get_state
from model_optimizer.runtime.server.streaming import ChoiceDelta, ChunkTemplate

router = APIRouter(route_class=ParsedBodyRoute)  # bodies parsed off the event loop (body.py)


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
    max_tokens = resolve_max_tokens(state, getattr(body, field), len(prompt.token_ids), field)
    params = sampling_params(body, stop, max_tokens, logprobs, state.sampling_defaults)
    generation = Generation(
        new_request_id("chatcmpl"),
        [prompt.token_ids],
        [params],
        body.priority,
        body.stream,
        include_usage=bool(body.stream_options and body.stream_options.include_usage),
    )
    fmt = ChatFormat(body, generation.request_id, state.model.name, TokenTexts(state.model.tokenizer))
    return await respond(request, state, generation, fmt)


class ChatFormat:
    """Chat's response and stream chunks (a ResponseFormat)."""

    def __init__(self, body: ChatCompletionRequest, request_id: str, model_name: str, texts: TokenTexts) -> None:
        self.body = body
        self.texts = texts
        self.num_top = body.top_logprobs or 0
        self.with_token_ids = body.return_token_ids or texts.tokenizer is None
        """Put token_ids on choices (chat needs a tokenizer for its template, so in practice: asked for)."""
        self.base = ChatCompletionChunk(id=request_id, model=model_name, choices=[])
        self.template = ChunkTemplate(self.base)

    def response(self, finals: list[RequestOutput], usage: UsageInfo) -> BaseModel:
        [final] = finals
        choices = []
        for c in final.outputs:
            logprobs = chat_logprobs(self.texts, c.logprobs, self.num_top) if c.logprobs is not None else None
            choices.append(
                ChatChoice(
                    index=c.index,
                    message=ChatResponseMessage(content=c.text),
                    logprobs=logprobs,
                    finish_reason=c.finish_reason,
                    stop_reason=c.stop_reason,
                    token_ids=list(c.token_ids) if self.with_token_ids else None,
                )
            )
        return ChatCompletionResponse(id=self.base.id, model=self.base.model, choices=choices, usage=usage)

    def head(self) -> list[BaseModel]:
        """The role first, for every choice (as OpenAI sends it)."""
        role = [ChatStreamChoice(index=i, delta=DeltaMessage(role="assistant", content="")) for i in range(self.body.n)]
        return [self.base.model_copy(update={"choices": role})]

    def chunk(self, deltas: list[ChoiceDelta]) -> bytes:
        """ChatStreamChoice's fields, in its order, as plain dicts (token_ids left out when not sent)."""
        choices = []
        for d in deltas:
            c = d.completion
            logprobs = chat_logprobs_dict(self.texts, c.logprobs, self.num_top) if c.logprobs is not None else None
            choice = {
                "index": c.index,
                "delta": {"content": c.text} if c.text or not c.finished else {},
                "logprobs": logprobs,
                "finish_reason": c.finish_reason,
                "stop_reason": c.stop_reason,
            }
            if self.with_token_ids:
                choice["token_ids"] = c.token_ids
            choices.append(choice)
        return self.template.event(choices)

    def usage_chunk(self, usage: UsageInfo) -> BaseModel:
        return self.base.model_copy(update={"usage": usage})
