"""POST /v1/chat/completions: messages (and tools) through the chat template; streamed deltas start with
the role. With tools or --reasoning-parser, each choice's text becomes content, reasoning_content and
tool_calls (chat_output.py), whole or as deltas. This module checks the request and builds its engine
request; chat_format.py renders the answer."""

from __future__ import annotations

import functools
from dataclasses import replace

from fastapi import APIRouter, Request
from fastapi.responses import Response

from model_optimizer.runtime.server.body import ParsedBodyRoute
from model_optimizer.runtime.server.chat_format import ChatFormat, message_text
from model_optimizer.runtime.server.errors import APIError
from model_optimizer.runtime.server.logprobs import TokenTexts, tokens_as_ids
from model_optimizer.runtime.server.prompts import Prompt, chat_prompt, kept_tokens
from model_optimizer.runtime.server.protocol_chat import ChatCompletionRequest
from model_optimizer.runtime.server.protocol_outputs import ChatCompletionResponse
from model_optimizer.runtime.server.reasoning import REASONING_PARSERS, ReasoningParser
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
from model_optimizer.runtime.server.structured import check_constraint, requested_constraint
from model_optimizer.runtime.server.tools import ToolPlan, custom_constraint, tool_plan
from model_optimizer.runtime.structured.params import StructuredOutputs

router = APIRouter(route_class=ParsedBodyRoute)  # bodies parsed off the event loop (body.py)


@router.post("/v1/chat/completions", response_model=ChatCompletionResponse, responses=ERROR_RESPONSES)
async def create_chat_completion(body: ChatCompletionRequest, request: Request) -> Response:
    state = get_state(request)
    try:
        generation, fmt = await chat_generation(state, body, "chatcmpl", request)
    except ClientDisconnected:  # while its new constraint was checked
        return Response(status_code=499)
    return await respond(request, state, generation, fmt)


async def chat_generation(
    state: ServerState, body: ChatCompletionRequest, id_prefix: str, request: Request | None = None
) -> tuple[Generation, ChatFormat]:
    """The engine request of a chat request and the format of its answer, every check done (APIError when one
    fails; ClientDisconnected when the client of `request` leaves while a new constraint is checked);
    /v1/responses runs its requests through this too."""
    state.check_model(body.model)
    state.check_accepting()
    state.check_generates()
    unsupported = body.unsupported_field()
    if unsupported:
        raise APIError(400, f"{unsupported} is not supported: use tools and tool_choice", unsupported)
    refusal = body.template_refusal()
    if refusal is not None:
        raise APIError(400, *refusal)
    body.check_format_name()
    num_top = body.top_logprobs or 0
    if num_top and not body.logprobs:  # as OpenAI and vLLM: asked for alternatives, not for logprobs
        raise APIError(400, "top_logprobs needs logprobs: true", "top_logprobs")
    logprobs = num_top if body.logprobs else None
    stop = check_caps(state, body, logprobs if logprobs is not None else body.top_logprobs)
    rules = await token_rules(state, body)
    if body.stream and body.prompt_logprobs:  # vLLM's rule: answered beside the choices, so only whole
        raise APIError(400, "prompt_logprobs are not available when stream is true", "prompt_logprobs")
    plan = tool_plan(state, body)
    prompt = await request_prompt(state, body, plan.template_tools)
    plan = plan.for_prompt(prompt.text, functools.partial(state.model.tokenizer.encode, add_special_tokens=False))
    constraint = await _constraint(state, body, plan, request)
    name = state.config.reasoning_parser
    reasoning = REASONING_PARSERS[name].for_prompt(prompt.text, _last_turn_text(body)) if name else None
    if constraint is not None and reasoning is not None and not plan.reasoning_end:  # the answer's, after thinking
        start, end = reasoning.constrained()
        constraint = replace(constraint, reasoning_start=start, reasoning_end=end)
    thinking = _thinking_budget(state, body, reasoning, plan.reasoning_end)
    field = "max_completion_tokens" if body.max_completion_tokens is not None else "max_tokens"
    max_tokens = resolve_max_tokens(state, getattr(body, field), len(prompt.token_ids), field, body.min_tokens)
    keep_special = any(p is not None and p.needs_special_tokens for p in (plan.parser, reasoning))
    params = sampling_params(
        body,
        stop,
        max_tokens,
        logprobs,
        state.sampling_defaults,
        constraint,
        keep_special,
        prompt_logprobs=None if body.stream else body.prompt_logprobs,  # streamed, only 0 gets here: none shown
        rules={**rules, **(thinking or {})},
    )
    beams = None
    if body.use_beam_search:
        if thinking:
            raise APIError(400, "thinking_token_budget does not apply with use_beam_search", "thinking_token_budget")
        field = None if constraint is None else (requested_constraint(body) or (None, "tools"))[1]
        beams = [beam_search_params(body, params, field)]
    generation = Generation(
        new_request_id(id_prefix),
        [prompt.token_ids],
        [params],
        body.priority,
        body.stream,
        body.stream_options,
        beam_search=beams,
    )
    texts = TokenTexts(state.model.tokenizer, as_ids=tokens_as_ids(body, state.config.return_tokens_as_token_ids))
    headers = request.scope["headers"] if request is not None and id_prefix == "chatcmpl" else None
    name = response_id(id_prefix, headers, generation.request_id)
    fmt = ChatFormat(body, name, state.model.name, texts, plan, reasoning, state.config.response_role)
    return generation, fmt


async def request_prompt(
    state: ServerState, body: ChatCompletionRequest, template_tools: list[dict] | None, for_generation: bool = True
) -> Prompt:
    """The request's prompt as its generation reads it: its messages through the template with its tools and
    kwargs, the last truncate_prompt_tokens kept (also /v1/responses/input_tokens' count, `for_generation`
    False: the context bound for an answer is not checked)."""
    return await chat_prompt(
        state,
        body.messages,
        body.add_generation_prompt,
        body.template_kwargs(),
        add_special_tokens=body.add_special_tokens,
        for_generation=for_generation,
        tools=template_tools,
        continue_final_message=body.continue_final_message,
        keep=kept_tokens(state, body.truncate_prompt_tokens),
    )


def _last_turn_text(body: ChatCompletionRequest) -> str:
    """The text of the last message that is not the assistant's (the question, a tool's result)."""
    return next((message_text(m) for m in reversed(body.messages) if m.role != "assistant"), "")


def _thinking_budget(
    state: ServerState, body: ChatCompletionRequest, reasoning: ReasoningParser | None, end_as: str = ""
) -> dict[str, object] | None:
    """SamplingParams fields of the request's thinking_token_budget: the end tag's tokens to force (`end_as`'s
    when given: ToolPlan.reasoning_end), and the start tag's when the model may open a block itself; None
    without a budget or when the prompt closed the block. 400 without --reasoning-parser, as vLLM."""
    if body.thinking_token_budget is None:
        return None
    if reasoning is None:
        raise APIError(
            400, "thinking_token_budget needs the server started with --reasoning-parser", "thinking_token_budget"
        )
    start, end = reasoning.constraint_tags()
    if not end:
        return None  # thinking is off for this prompt
    end = end_as or end
    encode = state.model.tokenizer.encode
    others = [list(encode(m, add_special_tokens=False)) for m in reasoning.ALSO_ENDS]
    return {
        "thinking_token_budget": body.thinking_token_budget,
        "thinking_end_token_ids": list(encode(end, add_special_tokens=False)),
        "thinking_start_token_ids": list(encode(start, add_special_tokens=False)) if start else None,
        "thinking_other_end_token_ids": [seq for seq in others if seq] or None,
    }


async def _constraint(
    state: ServerState, body: ChatCompletionRequest, plan: ToolPlan, request: Request | None
) -> StructuredOutputs | None:
    """The output constraint: the request's own, or the one its tool_choice makes; never both. Strict tools
    under tool_choice auto give way to a constraint the request brings (it says what the whole output is);
    under required or a named function, whose output is only calls, the request's own is checked and ignored."""
    await _check_custom_grammars(state, body, request)
    requested = requested_constraint(body)
    # tool_choice's own constraint binds; strict tools' calls under auto are only part of the output
    if plan.forces_call:
        requested = None if plan.constraint is None else (plan.constraint, "tools")
    elif plan.constraint is not None and (requested is None or plan.binding):
        if requested is not None:
            raise APIError(
                400,
                f"tool_choice required, named or allowed_tools constrains the output: leave out {requested[1]}",
                requested[1],
            )
        requested = (plan.constraint, "tools")
    if requested is None:
        return None
    await check_constraint(state, *requested, request)
    return requested[0]


async def _check_custom_grammars(state: ServerState, body: ChatCompletionRequest, request: Request | None) -> None:
    """400 for a custom tool whose grammar or regex cannot be compiled, whatever tool_choice is (OpenAI checks
    a tool's definition when it is sent, not when it is called). Verdicts are cached per grammar."""
    for tool in body.tools or []:
        if tool.type != "custom":
            continue
        so = custom_constraint(tool.custom)
        if so is None:
            continue
        try:
            await check_constraint(state, so, "tools", request)
        except APIError as exc:
            if exc.status_code != 400:
                raise
            reason = exc.message.removeprefix("tools: ")
            raise APIError(400, f"custom tool {tool.function.name!r}: {reason}", "tools") from None
