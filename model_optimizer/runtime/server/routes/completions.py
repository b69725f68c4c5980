"""POST /v1/completions: text, texts, token ids or lists of token ids; streamed over SSE or not."""

from __future__ import annotations

from fastapi import APIRouter, Request
from fastapi.responses import Response
from pydantic import BaseModel

from model_optimizer.runtime.engine.outputs import CompletionOutput, RequestOutput
from model_optimizer.runtime.server.body import ParsedBodyRoute
from model_optimizer.runtime.server.errors import APIError
from model_optimizer.runtime.server.logprobs import (
    TokenOffsets,
    TokenTexts,
    completion_logprobs_dict,
    echo_logprobs_dict,
    join_logprobs_dicts,
    prompt_logprobs_json,
    tokens_as_ids,
)
from model_optimizer.runtime.server.prompts import Prompt, kept_tokens, prompt_list, tokenize_prompts
from model_optimizer.runtime.server.protocol import CompletionRequest
from model_optimizer.runtime.server.protocol_outputs import CompletionChoice, CompletionResponse, UsageInfo
from model_optimizer.runtime.server.request_group import ClientDisconnected, Generation, new_request_id, respond
from model_optimizer.runtime.server.request_ids import response_id
from model_optimizer.runtime.server.routes import ERROR_RESPONSES
from model_optimizer.runtime.server.sampling import (
    beam_search_params,
    check_caps,
    resolve_max_tokens,
    sampling_params,
    token_rules,
)
from model_optimizer.runtime.server.state import ServerState, get_state
from model_optimizer.runtime.server.streaming import ChoiceDelta, ChunkTemplate, ErrorThenDone
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
    if body.echo and state.model.tokenizer is None:
        raise APIError(400, "echo needs the prompt as text, and this model has no tokenizer", "echo")
    if body.max_tokens == 0 and not body.echo:
        raise APIError(400, "max_tokens is 0; 0 is allowed only with echo (the prompt comes back alone)", "max_tokens")
    if body.max_tokens == 0 and body.min_tokens:  # checked here: the engine runs one token for it (below)
        raise APIError(400, f"min_tokens ({body.min_tokens}) must not exceed max_tokens (0)", "min_tokens")
    stop = check_caps(state, body, body.logprobs)
    rules = await token_rules(state, body)
    constraint = requested_constraint(body)
    if constraint is not None:
        try:
            await check_constraint(state, *constraint, request)
        except ClientDisconnected:  # while its new constraint was checked
            return Response(status_code=499)
    keep = kept_tokens(state, body.truncate_prompt_tokens)
    prompts = await tokenize_prompts(state, prompt_list(body.prompt), keep, body.add_special_tokens)
    max_tokens = 1 if body.max_tokens == 0 else body.max_tokens  # one token is generated, and dropped
    params = [
        sampling_params(
            body,
            stop,
            resolve_max_tokens(state, max_tokens, len(p.token_ids), min_tokens=body.min_tokens),
            body.logprobs,
            state.sampling_defaults,
            constraint[0] if constraint is not None else None,
            prompt_logprobs=_prompt_logprobs(body),
            rules=rules,
        )
        for p in prompts
    ]
    beams = None
    if body.use_beam_search:
        if body.max_tokens == 0:
            raise APIError(400, "max_tokens 0 (the prompt alone) does not apply with use_beam_search", "max_tokens")
        field = constraint[1] if constraint is not None else None
        beams = [beam_search_params(body, p, field) for p in params]
    echo = [await _echo_text(state, p) if body.echo else "" for p in prompts]
    generation = Generation(
        new_request_id("cmpl"),
        [p.token_ids for p in prompts],
        params,
        body.priority,
        body.stream,
        body.stream_options,
        counts_output=body.max_tokens != 0,
        beam_search=beams,
    )
    texts = TokenTexts(state.model.tokenizer, as_ids=tokens_as_ids(body, state.config.return_tokens_as_token_ids))
    name = response_id("cmpl", request.scope["headers"], generation.request_id)
    fmt = CompletionFormat(body, echo, name, state.model.name, texts, generation.token_ids)
    return await respond(request, state, generation, fmt)


def _prompt_logprobs(body: CompletionRequest) -> int | None:
    """What the engine computes for the prompt: the field, or as many alternatives as echo's logprobs show."""
    if body.echo and body.logprobs is not None:
        return max(body.prompt_logprobs or 0, body.logprobs)
    return body.prompt_logprobs


async def _echo_text(state: ServerState, prompt: Prompt) -> str:
    if prompt.text is not None:
        return prompt.text
    return await state.run_blocking(state.model.tokenizer.decode, prompt.token_ids)


class CompletionFormat(ErrorThenDone):
    """Completions' response and stream chunks (a ResponseFormat). Choice i*n + j is prompt i's j-th
    completion; with echo, each choice's text starts with its prompt, and with echo and logprobs its
    logprobs start with the prompt tokens' (the first one's null). max_tokens 0 (echo only): the one token
    generated is dropped, the choice holds the prompt alone and usage counts no completion token."""

    def __init__(
        self,
        body: CompletionRequest,
        echo: list[str],
        request_id: str,
        model_name: str,
        texts: TokenTexts,
        prompt_token_ids: list[list[int]] | None = None,
    ) -> None:
        """`prompt_token_ids`, per prompt: needed for echo with logprobs (the prompt tokens lead them)."""
        self.n = body.n
        self.num_top = body.logprobs or 0
        self.echo = echo
        self.texts = texts
        self.prompt_token_ids = prompt_token_ids or []
        self.prompt_only = body.max_tokens == 0
        self.echo_logprobs = body.echo and body.logprobs is not None
        self.show_prompt_logprobs = body.prompt_logprobs is not None
        self.prompt_logprobs: dict[int, list] = {}
        """Per prompt, its prompt logprobs as they came (a stream: with its first output that has a token)."""
        self.with_token_ids = body.return_token_ids or texts.tokenizer is None
        """Put token_ids on choices: asked for, or the only output a model without a tokenizer has."""
        self.offsets: dict[tuple[int, int], TokenOffsets] = {}
        """A stream: per (prompt, choice), where its next token's text starts (logprobs' text_offset)."""
        self.base = CompletionResponse(id=request_id, model=model_name, choices=[])
        self.template = ChunkTemplate(self.base)

    def response(self, finals: list[RequestOutput], usage: UsageInfo) -> BaseModel:
        choices = []
        for i, output in enumerate(finals):
            self.prompt_logprobs[i] = output.prompt_logprobs or []
            for c in output.outputs:
                choices.append(
                    CompletionChoice(**self._choice(i, c, True, TokenOffsets(self.texts, len(self.echo[i]))))
                )
        return self.base.model_copy(update={"choices": choices, "usage": usage})

    def head(self) -> list[BaseModel]:
        return []

    def chunk(self, deltas: list[ChoiceDelta]) -> bytes:
        """CompletionChoice's fields, in its order, as plain dicts (token_ids and prompt_logprobs left out
        when not sent)."""
        choices = []
        for d in deltas:
            if d.prompt_logprobs:
                self.prompt_logprobs[d.prompt_index] = d.prompt_logprobs
            key = (d.prompt_index, d.completion.index)
            offsets = self.offsets.get(key)
            if offsets is None:
                offsets = self.offsets[key] = TokenOffsets(self.texts, len(self.echo[d.prompt_index]))
            choice = self._choice(d.prompt_index, d.completion, d.first, offsets)
            if choice["token_ids"] is None:
                del choice["token_ids"]
            if choice["prompt_logprobs"] is None:
                del choice["prompt_logprobs"]
            choices.append(choice)
        return self.template.event(choices)

    def _choice(self, i: int, c: CompletionOutput, first: bool, offsets: TokenOffsets) -> dict:
        """One choice as a dict; `first`: its first chunk (or the whole response), which carries the echo;
        `offsets`: where its tokens' texts start (moved on past them)."""
        echo = self.echo[i]
        text, token_ids = ("", []) if self.prompt_only else (c.text, c.token_ids)
        logprobs = None
        if c.logprobs is not None and not self.prompt_only:
            logprobs = completion_logprobs_dict(self.texts, c.logprobs, offsets, self.num_top)
        if first and self.echo_logprobs:
            head = echo_logprobs_dict(
                self.texts, self.prompt_token_ids[i], self.prompt_logprobs.get(i, []), self.num_top, echo
            )
            logprobs = join_logprobs_dicts(head, logprobs)
        prompt_logprobs = None
        if first and self.show_prompt_logprobs:
            prompt_logprobs = prompt_logprobs_json(self.texts, self.prompt_logprobs.get(i, []))
        return {
            "index": i * self.n + c.index,
            "text": echo + text if first else text,
            "logprobs": logprobs,
            "finish_reason": "length" if self.prompt_only and c.finish_reason else c.finish_reason,
            "stop_reason": None if self.prompt_only else c.stop_reason,
            "prompt_logprobs": prompt_logprobs,
            "token_ids": list(token_ids) if self.with_token_ids else None,
        }

    def usage_chunk(self, usage: UsageInfo) -> BaseModel:
        return self.base.model_copy(update={"usage": usage})
