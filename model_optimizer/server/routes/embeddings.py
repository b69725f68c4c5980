"""POST /v1/embeddings: input as text, texts, token ids or lists of token ids; float or base64 vectors.

Served when the model is an embedding model (`ServerState.embedder`, a model_optimizer.embed
Embedder); otherwise a clear 400. The Embedder tokenizes, applies `dimensions` (Matryoshka
truncation, then renormalization) and counts tokens itself; it runs in a worker thread.
"""

from __future__ import annotations

import base64

from fastapi import APIRouter, Request

from model_optimizer.server.errors import APIError
from model_optimizer.server.prompts import prompt_list
from model_optimizer.server.protocol import EmbeddingRequest
from model_optimizer.server.routes import ERROR_RESPONSES
from model_optimizer.server.state import get_state

router = APIRouter()


@router.post("/v1/embeddings", responses=ERROR_RESPONSES)
async def create_embedding(body: EmbeddingRequest, request: Request) -> dict:
    state = get_state(request)
    state.check_model(body.model)
    state.check_accepting()
    if state.embedder is None:
        raise APIError(400, f"the model `{state.model.name}` does not support embeddings", "model")
    if isinstance(body.input, list) and not body.input:
        raise APIError(400, "input is empty: give a string, a list of strings or token ids", "input")
    inputs = prompt_list(body.input)
    empty = next((i for i, item in enumerate(inputs) if len(item) == 0), None)
    if empty is not None:
        raise APIError(400, f"input {empty} is empty: every input needs at least one character or token", "input")
    if len(inputs) > state.config.max_embedding_inputs:
        raise APIError(
            400, f"got {len(inputs)} inputs; at most {state.config.max_embedding_inputs} per request", "input"
        )
    if any(isinstance(i, str) and _has_surrogate(i) for i in inputs):
        raise APIError(400, "input is not valid Unicode text (lone surrogate)", "input")
    try:
        out = await state.embedder.aencode(inputs, dimensions=body.dimensions)
    except ValueError as exc:
        raise APIError(400, str(exc), "input") from None
    vectors = out.embeddings.float().contiguous()
    data = [
        {"object": "embedding", "index": i, "embedding": _encode(v, body.encoding_format)}
        for i, v in enumerate(vectors)
    ]
    num_tokens = out.num_prompt_tokens
    return {
        "object": "list",
        "model": state.model.name,
        "data": data,
        "usage": {"prompt_tokens": num_tokens, "total_tokens": num_tokens},
    }


def _has_surrogate(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return True
    return False


def _encode(vector, encoding_format: str) -> list[float] | str:
    """float: a JSON list; base64: little-endian float32 bytes, as OpenAI sends them."""
    if encoding_format == "base64":
        return base64.b64encode(vector.numpy().astype("<f4").tobytes()).decode()
    return vector.tolist()
