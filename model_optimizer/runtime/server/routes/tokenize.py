"""POST /tokenize and /detokenize, shaped as vLLM's (clients and scripts written for `vllm serve` work).

/tokenize takes a prompt, or chat messages rendered through the chat template, and returns the token
ids, their count and max_model_len; /detokenize turns token ids back into text.
"""

from __future__ import annotations

from fastapi import APIRouter, Request

from model_optimizer.runtime.sampling_checks import outside_vocab
from model_optimizer.runtime.server.body import ParsedBodyRoute
from model_optimizer.runtime.server.errors import APIError
from model_optimizer.runtime.server.prompts import chat_prompt, encode
from model_optimizer.runtime.server.protocol_tokenize import (
    DetokenizeRequest,
    DetokenizeResponse,
    TokenizeRequest,
    TokenizeResponse,
)
from model_optimizer.runtime.server.routes import ERROR_RESPONSES
from model_optimizer.runtime.server.state import ServerState, get_state
from model_optimizer.runtime.server.tools import as_template_tools

router = APIRouter(route_class=ParsedBodyRoute)  # bodies parsed off the event loop (body.py)


@router.post("/tokenize", response_model=TokenizeResponse, responses=ERROR_RESPONSES)
async def tokenize(body: TokenizeRequest, request: Request) -> TokenizeResponse:
    state = _tokenizing_state(request, body.model)
    if (body.prompt is None) == (body.messages is None):
        raise APIError(400, "give exactly one of prompt (text) or messages (a chat)", "prompt")
    refusal = body.template_refusal()
    if refusal is not None:
        raise APIError(400, *refusal)
    if body.messages is not None:
        prompt = await chat_prompt(
            state,
            body.messages,
            body.add_generation_prompt,
            body.template_variables(),
            tools=as_template_tools(body.tools) if body.tools is not None else None,
            add_special_tokens=bool(body.add_special_tokens),
            for_generation=False,
            continue_final_message=body.continue_final_message,
        )
        token_ids = prompt.token_ids
    else:
        add_special = True if body.add_special_tokens is None else body.add_special_tokens
        token_ids = await encode(state, body.prompt, add_special, allow_empty=True, for_generation=False)
    convert = state.model.tokenizer.convert_ids_to_tokens
    strs = await state.run_blocking(convert, token_ids) if body.return_token_strs else None
    return TokenizeResponse(
        count=len(token_ids), max_model_len=state.model.max_model_len, tokens=token_ids, token_strs=strs
    )


@router.post("/detokenize", response_model=DetokenizeResponse, responses=ERROR_RESPONSES)
async def detokenize(body: DetokenizeRequest, request: Request) -> DetokenizeResponse:
    state = _tokenizing_state(request, body.model)
    return DetokenizeResponse(prompt=await state.run_blocking(_detokenize, state, body.tokens))


def _detokenize(state: ServerState, tokens: list[int]) -> str:
    """The text of `tokens`, once each is in the vocabulary (a worker thread's job: up to 2**20 ids)."""
    error = outside_vocab("tokens", tokens, state.model.vocab_size)
    if error is not None:
        raise APIError(400, error, "tokens")
    return state.model.tokenizer.decode(tokens)


def _tokenizing_state(request: Request, model: str | None) -> ServerState:
    state = get_state(request)
    state.check_model(model)
    state.check_accepting()  # an embedding model too: clients count tokens to pick truncate_prompt_tokens
    if state.model.tokenizer is None:
        raise APIError(400, "this model has no tokenizer, so the server cannot tokenize or detokenize", "model")
    return state
