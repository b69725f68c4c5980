"""POST /v1/completions: text, texts, token ids or lists of token ids; streamed over SSE or not."""

from __future__ import annotations

from fastapi import APIRouter, Request
from fastapi.responses import Response
from pydantic import BaseModel

from model_optimizer.runtime.engine.outputs import RequestOutput
from model_optimizer.runtime.server.body import ParsedBodyRoute
from model_optimizer.runtime.server.errors import APIError
from model_optimizer.runtime.server.logprobs import TokenTexts, completion_logprobs, completion_logprobs_dict
from model_optimizer.runtime.server.prompts import Prompt, prompt_list, tokenize_prompts
from model_optimizer.runtime.server.protocol import CompletionChoice, CompletionRequest, CompletionResponse, UsageInfo
from model_optimizer.runtime.server.request_group import Generation, new_request_id, respond
from model_optimizer.runtime.server.routes import ERROR_RESPONSES
from model_optimizer.runtime.server.sampling import check_caps, resolve_max_tokens, sampling_params
from model_optimizer.runtime.server.state import ServerState, get_state
from model_optimizer.runtime.server.streaming import ChoiceDelta, ChunkTemplate
from model_optimizer.runtime.server.structured import check_constraint, requested_constraint

router = APIRouter(route_class=ParsedBodyRoute)  # bodies parsed off the event loop (body.py)


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
    if body.echo and state.model.tokenizer is None:
        raise APIError(400, "echo needs the prompt as text, and this model has no tokenizer", "echo")
    stop = check_caps(state, body, body.logprobs)
    constraint = requested_constraint(body)
    if constraint is not None:
        await check_constraint(state, *constraint)
    prompts = await tokenize_prompts(state, prompt_list(body.prompt))
    params = [
        sampling_params(
            body,
            stop,
            resolve_max_tokens(state, body.max_tokens, len(p.token_ids)),
            body.logprobs,
            state.sampling_defaults,
            constraint[0] if constraint is not None else None,
        )
        for p in prompts
    ]
    echo = [await _echo_text(state, p) if body.echo else "" for p in prompts]
    generation = Generation(
        new_request_id("cmpl"),
        [p.token_ids for p in prompts],
        params,
        body.priority,
        body.stream,
        include_usage=bool(body.stream_options and body.stream_options.include_usage),
    )
    texts = TokenTexts(state.model.tokenizer)
    fmt = CompletionFormat(body, echo, generation.request_id, state.model.name, texts)
    return await respond(request, state, generation, fmt)


async def _echo_text(state: ServerState, prompt: Prompt) -> str:
    if prompt.text is not None:
        return prompt.text
    return await state.run_blocking(state.model.tokenizer.decode, prompt.token_ids)


class CompletionFormat:
    """Completions' response and stream chunks (a ResponseFormat). Choice i*n + j is prompt i's j-th
    completion; with echo, each choice's text starts with its prompt."""

    def __init__(
        self, body: CompletionRequest, echo: list[str], request_id: str, model_name: str, texts: TokenTexts
    ) -> None:
        self.n = body.n
        self.num_top = body.logprobs or 0
        self.echo = echo
        self.texts = texts
        self.with_token_ids = body.return_token_ids or texts.tokenizer is None
        """Put token_ids on choices: asked for, or the only output a model without a tokenizer has."""
        self.base = CompletionResponse(id=request_id, model=model_name, choices=[])
        self.template = ChunkTemplate(self.base)

    def response(self, finals: list[RequestOutput], usage: UsageInfo) -> BaseModel:
        choices = []
        for i, output in enumerate(finals):
            for c in output.outputs:
                logprobs = None
                if c.logprobs is not None:
                    logprobs = completion_logprobs(self.texts, c.logprobs, len(self.echo[i]), self.num_top)
                choices.append(
                    CompletionChoice(
                        index=i * self.n + c.index,
                        text=self.echo[i] + c.text,
                        logprobs=logprobs,
                        finish_reason=c.finish_reason,
                        stop_reason=c.stop_reason,
                        token_ids=list(c.token_ids) if self.with_token_ids else None,
                    )
                )
        return self.base.model_copy(update={"choices": choices, "usage": usage})

    def head(self) -> list[BaseModel]:
        return []

    def chunk(self, deltas: list[ChoiceDelta]) -> bytes:
        """CompletionChoice's fields, in its order, as plain dicts (token_ids left out when not sent)."""
        choices = []
        for d in deltas:
            c, echo = d.completion, self.echo[d.prompt_index]
            logprobs = None
            if c.logprobs is not None:
                logprobs = completion_logprobs_dict(self.texts, c.logprobs, len(echo) + d.text_offset, self.num_top)
            choice = {
                "index": d.prompt_index * self.n + c.index,
                "text": echo + c.text if d.first else c.text,
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
