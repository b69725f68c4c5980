"""POST /v1/embeddings: input as text, texts, token ids or lists of token ids; float or base64 vectors.

Served when `ServerState.embed` is set (an embedding model); otherwise a clear 400.
The embedding function runs on the engine thread, between steps, never concurrently with one.
"""

from __future__ import annotations

import base64
import math
import struct

from fastapi import APIRouter, Request

from model_optimizer.server.errors import APIError
from model_optimizer.server.prompts import prompt_list, tokenize_prompts
from model_optimizer.server.protocol import EmbeddingRequest
from model_optimizer.server.routes import ERROR_RESPONSES
from model_optimizer.server.state import get_state

router = APIRouter()


@router.post("/v1/embeddings", responses=ERROR_RESPONSES)
async def create_embedding(body: EmbeddingRequest, request: Request) -> dict:
    state = get_state(request)
    state.check_model(body.model)
    state.check_accepting()
    if state.embed is None:
        raise APIError(400, f"the model `{state.model_name}` does not support embeddings", "model")
    prompts = await tokenize_prompts(state, prompt_list(body.input))
    for p in prompts:
        if len(p.token_ids) > state.max_model_len:
            raise APIError(400, f"an input has {len(p.token_ids)} tokens, more than max_model_len {state.max_model_len}", "input")
    embed = state.embed
    vectors = await state.engine.call(lambda: embed([p.token_ids for p in prompts]))
    data = []
    for i, vector in enumerate(vectors):
        vector = list(vector)
        if body.dimensions is not None:
            if body.dimensions > len(vector):
                raise APIError(400, f"dimensions is {body.dimensions}, but the model's embeddings have {len(vector)}", "dimensions")
            vector = _normalize(vector[: body.dimensions])
        data.append({"object": "embedding", "index": i, "embedding": _encode(vector, body.encoding_format)})
    num_tokens = sum(len(p.token_ids) for p in prompts)
    return {"object": "list", "model": state.model_name, "data": data,
            "usage": {"prompt_tokens": num_tokens, "total_tokens": num_tokens}}


def _normalize(vector: list[float]) -> list[float]:
    """Truncated (Matryoshka) embeddings are re-normalized to unit length."""
    norm = math.sqrt(sum(v * v for v in vector)) or 1.0
    return [v / norm for v in vector]


def _encode(vector: list[float], encoding_format: str) -> list[float] | str:
    if encoding_format == "base64":
        return base64.b64encode(struct.pack(f"<{len(vector)}f", *vector)).decode()
    return vector
