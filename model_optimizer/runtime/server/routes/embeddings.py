"""POST /v1/embeddings: input as text, texts, token ids or lists of token ids, or a chat (vLLM's `messages`);
float or base64 vectors (base64 in vLLM's `embed_dtype` and `endianness`, float32 little-endian by default).

Served when the model is an embedding model (`ServerState.embedder`, a model_optimizer.runtime.embed
Embedder); otherwise a clear 400. The Embedder tokenizes, applies `dimensions` (Matryoshka
truncation, then renormalization) and counts tokens itself; it runs in a worker thread. `dimensions`
is taken only from models trained for it: decoder embedders (Qwen3-Embedding family) and models whose
config declares Matryoshka training. vLLM's `normalize` / `use_activation` and `add_special_tokens` go to
the Embedder as they are; a chat is rendered through the chat template as /tokenize renders it and embedded
as those token ids, so /tokenize shows what was read.

A request is in flight (`Embedder.calls`, which the SIGTERM drain waits for) until its response is ready.
A client that hangs up has its call stopped before the next batch (status 499 in http_requests_total and
finished_reason "abort"; uvicorn writes no access line for a client that has gone); a drain that runs out
of time stops it the same way and answers 503. Each input counts in vLLM's request metrics as a
finished request, as vLLM counts the prompts of a pooling request.
"""

from __future__ import annotations

import time
import uuid
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any

from fastapi import APIRouter, Request
from fastapi.responses import Response

from model_optimizer.common.text import not_utf8_at
from model_optimizer.runtime.embed.calls import EmbedCancelled
from model_optimizer.runtime.embed.inputs import BLANK_HINT, InputError, is_blank
from model_optimizer.runtime.engine.input_processor import chat_template_for
from model_optimizer.runtime.server.body import ParsedBodyRoute
from model_optimizer.runtime.server.errors import APIError
from model_optimizer.runtime.server.prompts import chat_prompt, prompt_list
from model_optimizer.runtime.server.protocol_embeddings import EmbeddingsBody
from model_optimizer.runtime.server.request_group import ClientDisconnected, until_disconnect
from model_optimizer.runtime.server.request_ids import response_id
from model_optimizer.runtime.server.routes import ERROR_RESPONSES
from model_optimizer.runtime.server.state import RETRY_AFTER_S, ServerState, get_state

if TYPE_CHECKING:  # the embedder module imports torch, which a generation frontend never loads
    from model_optimizer.runtime.embed.embedder import EmbedOutput

router = APIRouter(route_class=ParsedBodyRoute)  # bodies parsed off the event loop (body.py)


MAX_REQUEST_TOKENS = 300_000
"""Most tokens one request's inputs may hold in all (after truncation): OpenAI's limit, "all embedding
models enforce a maximum of 300,000 tokens summed across all inputs in a single request" (API reference,
https://platform.openai.com/docs/api-reference/embeddings/create, `input`). It bounds what one request can
make the server compute (2048 inputs of a 32k-token decoder embedder would be 67M tokens)."""


@dataclass(frozen=True)
class EmbedOptions:
    """A request's settings for `Embedder.encode`, by its keyword names."""

    dimensions: int | None = None
    truncate_prompt_tokens: int | None = None
    normalize: bool | None = None
    """None: as the model folder says."""
    add_special_tokens: bool = True


@router.post("/v1/embeddings", response_model=dict, responses=ERROR_RESPONSES)
async def create_embedding(body: EmbeddingsBody, request: Request) -> dict | Response:
    state = get_state(request)
    state.check_model(body.model)
    state.check_accepting()
    embedder = state.embedder
    if embedder is None:
        raise APIError(400, f"the model `{state.model.name}` does not support embeddings", "model")
    body.check_one_input()
    normalize = body.checked_normalize()
    chat = body.messages is not None
    inputs = [await _chat_ids(state, body)] if chat else checked_inputs(body.input, state.config.max_embedding_inputs)
    if body.dimensions is not None:
        check_dimensions(embedder, body.dimensions)
    # a chat's ids are read as rendered; add_special_tokens was applied when they were made
    options = EmbedOptions(
        body.dimensions, body.truncate_prompt_tokens, normalize, body.add_special_tokens is not False
    )
    try:
        out = await embed_inputs(state, request, inputs, options, ["messages"] if chat else None)
    except ClientDisconnected:
        return Response(status_code=499)
    vectors = out.embeddings.float()
    if body.encoding_format == "base64":
        from model_optimizer.runtime.embed.vector_bytes import base64_vectors

        encoded: list = base64_vectors(vectors, body.embed_dtype, body.endianness)
    else:
        encoded = vectors.tolist()
    num_tokens = out.num_prompt_tokens
    return {
        "id": response_id("embd", request.scope["headers"], f"embd-{uuid.uuid4().hex}"),
        "object": "list",
        "created": int(time.time()),
        "model": state.model.name,
        "data": [{"object": "embedding", "index": i, "embedding": e} for i, e in enumerate(encoded)],
        "usage": {"prompt_tokens": num_tokens, "total_tokens": num_tokens},
    }


async def _chat_ids(state: ServerState, body: EmbeddingsBody) -> list[int]:
    """The token ids of the request's chat, rendered through the chat template as /tokenize renders it
    (special tokens added on top only when add_special_tokens is true)."""
    try:
        chat_template_for(state.model.tokenizer, state.chat_template)
    except ValueError as exc:  # chat_prompt's advice is for generation
        raise APIError(
            400, f"{exc}: embed the text as input, or start the server with --chat-template FILE", "messages"
        ) from None
    prompt = await chat_prompt(
        state,
        body.messages or [],
        body.add_generation_prompt,
        body.template_variables(),
        add_special_tokens=bool(body.add_special_tokens),
        for_generation=False,
        continue_final_message=body.continue_final_message,
    )
    return prompt.token_ids


async def embed_inputs(
    state: ServerState,
    request: Request,
    inputs: list[str | list[int]],
    options: EmbedOptions | None = None,
    names: list[str] | None = None,
) -> EmbedOutput:
    """The embeddings of a request's checked inputs, counted in flight (the SIGTERM drain waits for them) and
    in the metrics: ClientDisconnected when the client hangs up (the call stops before its next batch; the
    caller answers 499), a 503 when a drain runs out of time, a 400 naming the field an input breaks
    (`names`: each input's name in the request, as "text_2[0]", where its position in `inputs` is not)."""
    embedder = state.embedder
    settings = asdict(options or EmbedOptions())
    start = time.perf_counter()
    # in flight from here (no await before it: a drain that starts now counts it) until the response is ready
    with embedder.calls.open(MAX_REQUEST_TOKENS) as call:
        try:
            out = await until_disconnect(request, embedder.aencode(inputs, call=call, **settings))
        except ClientDisconnected:  # 499 in http_requests_total
            state.metrics.embeddings_aborted(len(inputs), time.perf_counter() - start)
            raise
        except EmbedCancelled:  # the drain ran out of time
            state.metrics.embeddings_aborted(len(inputs), time.perf_counter() - start)
            raise APIError(
                503, "the server shut down before the request finished", headers={"Retry-After": RETRY_AFTER_S}
            ) from None
        except ValueError as exc:
            if names is not None and isinstance(exc, InputError):  # named as the request names it
                name = names[exc.index]
                param = name.split("[")[0] if exc.param == "input" else exc.param
                raise APIError(400, f"{name}{exc.detail}", param) from None
            raise APIError(400, str(exc), _param(exc)) from None
        state.metrics.embeddings_finished(out.num_tokens, time.perf_counter() - start)
        return out


def checked_inputs(value: Any, max_inputs: int, field: str = "input") -> list[str | list[int]]:
    """A request's inputs (`field`: a text, texts, token ids or lists of them) as a list, or a 400 naming the
    first bad one (before any is tokenized)."""
    if isinstance(value, list) and not value:
        raise APIError(400, f"{field} is empty: give a string, a list of strings or token ids", field)
    inputs = prompt_list(value)
    for i, item in enumerate(inputs):
        if isinstance(item, list) and not item:
            raise APIError(400, f"{field} {i} is an empty list of token ids: give at least one token id", field)
        if isinstance(item, str) and is_blank(item):
            raise APIError(400, f"{field} {i} is {BLANK_HINT}: every input needs visible text or token ids", field)
    if len(inputs) > max_inputs:
        raise APIError(400, f"got {len(inputs)} inputs; at most {max_inputs} per request", field)
    if any(isinstance(i, str) and not_utf8_at(i) is not None for i in inputs):
        raise APIError(400, f"{field} is not valid Unicode text (lone surrogate)", field)
    return inputs


def _param(exc: ValueError) -> str:
    """The request field an embedder's ValueError is about."""
    if isinstance(exc, InputError):
        return exc.param
    for name in ("truncate_prompt_tokens", "dimensions"):
        if str(exc).startswith(name):
            return name
    return "input"


def check_dimensions(embedder: Any, dimensions: int) -> None:
    """400 naming `dimensions` when the embedder refuses it (out of range, or a model not trained to be cut
    short: truncating such a model's vectors silently loses quality); the Embedder's own check
    (runtime/embed/matryoshka.py), so `Embedder.encode`, `LLM.embed` and `mopt embed` refuse alike."""
    try:
        embedder.check_dimensions(dimensions)
    except ValueError as exc:
        raise APIError(400, str(exc), "dimensions") from None
