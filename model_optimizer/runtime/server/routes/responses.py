"""POST /v1/responses: OpenAI's Responses API, answered by the chat pipeline.

The request becomes a chat completion (protocol_responses.py), so templates, tools and tool parsers,
--reasoning-parser, structured outputs and every check behave as on /v1/chat/completions; chat's errors
are named as this request spells its fields. The answer is a response object, or its stream of OpenAI's
events (responses_output.py). Nothing is stored (store is answered false): the routes of a stored response
(GET and DELETE /v1/responses/{id}, its cancel and input_items) are 404s that say so. POST
/v1/responses/input_tokens counts a request's prompt tokens.
"""

from __future__ import annotations

import re
from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import Response

from model_optimizer.runtime.server.body import ParsedBodyRoute
from model_optimizer.runtime.server.errors import APIError
from model_optimizer.runtime.server.protocol import StreamOptions
from model_optimizer.runtime.server.protocol_responses import ResponsesRequest
from model_optimizer.runtime.server.request_group import ClientDisconnected, respond
from model_optimizer.runtime.server.responses_output import ResponseObject, ResponsesFormat
from model_optimizer.runtime.server.routes import ERROR_RESPONSES
from model_optimizer.runtime.server.routes.chat import chat_generation, request_prompt
from model_optimizer.runtime.server.state import get_state
from model_optimizer.runtime.server.tools import tool_plan

router = APIRouter(route_class=ParsedBodyRoute)


PARAMS = (("max_completion_tokens", "max_output_tokens"), ("max_tokens", "max_output_tokens"),
          ("response_format.json_schema", "text.format"), ("response_format", "text.format"),
          ("prompt", "input"), ("logprobs", "top_logprobs"))  # fmt: skip
"""Chat's field paths at the start of an error's param, and the request's names for them (a chat message's
index is not an input item's: instructions come first and items merge, so messages.N is named input; chat's
logprobs cap is on the alternatives, top_logprobs here)."""
WORDS = (
    (r"\bmax_(completion_)?tokens\b", "max_output_tokens"),
    (r"\bresponse_format(\.json_schema)?\b", "text.format"),  # json_schema's fields sit in text.format itself
    (r"^logprobs\b", "top_logprobs"),  # the cap's 400 ("logprobs is 21; this server allows at most 20")
)
"""Chat's field names in an error's message, as whole words (never inside a name the client chose)."""


@router.post("/v1/responses", response_model=ResponseObject, responses=ERROR_RESPONSES)
async def create_response(body: ResponsesRequest, request: Request) -> Response:
    state = get_state(request)
    body.refuse_state()
    try:
        generation, chat = await chat_generation(state, body.to_chat(), "resp", request)
    except APIError as exc:  # chat's checks name chat's fields: named as this request spells them
        raise APIError(exc.status_code, _renamed(exc.message), _param(exc.param), exc.headers) from None
    except ClientDisconnected:  # while its new constraint was checked
        return Response(status_code=499)
    generation.request_id = generation.request_id.replace("resp-", "resp_", 1)  # OpenAI's spelling of ids
    if body.stream:  # the closing event carries the usage: always asked for
        generation.stream, generation.stream_options = True, StreamOptions(include_usage=True)
    return await respond(request, state, generation, ResponsesFormat(body, chat, generation.request_id))


@router.post("/v1/responses/input_tokens", responses=ERROR_RESPONSES)
async def count_input_tokens(body: ResponsesRequest, request: Request) -> dict[str, Any]:
    """OpenAI's count of a request's input tokens (client.responses.input_tokens.count): its prompt as
    POST /v1/responses renders it (instructions, items, tools, reasoning effort), nothing generated."""
    state = get_state(request)
    body.refuse_state()
    try:
        chat = body.to_chat()
        state.check_model(chat.model)
        state.check_accepting()
        state.check_generates()
        if (refusal := chat.template_refusal()) is not None:
            raise APIError(400, *refusal)
        prompt = await request_prompt(state, chat, tool_plan(state, chat).template_tools, for_generation=False)
    except APIError as exc:
        raise APIError(exc.status_code, _renamed(exc.message), _param(exc.param), exc.headers) from None
    return {"object": "response.input_tokens", "input_tokens": len(prompt.token_ids)}


@router.get("/v1/responses/{response_id}", responses=ERROR_RESPONSES)
@router.delete("/v1/responses/{response_id}", responses=ERROR_RESPONSES)
@router.post("/v1/responses/{response_id}/cancel", responses=ERROR_RESPONSES)
@router.get("/v1/responses/{response_id}/input_items", responses=ERROR_RESPONSES)
async def stored_response(response_id: str) -> Response:
    """OpenAI's routes of a stored response (retrieve, delete, cancel, its input items): 404 saying why, as
    nothing is stored here (a bare "Not Found" would read as a wrong base URL)."""
    raise APIError(
        404,
        f"no response {response_id!r} is stored: this server stores none (store is answered false), so a "
        "response cannot be retrieved, deleted, cancelled or listed; each is whole in its reply",
        "response_id",
    )


def _renamed(message: str) -> str:
    """An error message with chat's field names (WORDS) as this request's."""
    for pattern, name in WORDS:
        message = re.sub(pattern, name, message)
    return message


def _param(param: str | None) -> str | None:
    """A chat field path (an error's param) as this request's field."""
    if param is None:
        return None
    if match := re.fullmatch(r"tools\.(\d+)\.function(.*)", param):
        return f"tools[{match[1]}]{match[2]}"
    if param == "messages" or param.startswith("messages."):
        return "input"
    for chat_name, name in PARAMS:
        if param == chat_name or param.startswith(chat_name + "."):
            return name + param[len(chat_name) :]
    return param
