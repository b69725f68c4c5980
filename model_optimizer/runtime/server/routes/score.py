"""vLLM's scoring endpoints for an embedding model: POST /score, /v1/score (text pairs: text_1 and text_2, or
vLLM's other names for them, data_1 and data_2 or queries and documents) and /rerank, /v1/rerank,
/v2/rerank (documents ranked against a query). A pair's score is the cosine similarity of its texts'
embeddings (runtime/embed/scoring.py), as vLLM scores with an embedding model; each distinct text is embedded
once, through the same path as /v1/embeddings (in flight for the drain, counted in the metrics). The usage is
vLLM's, counted per pair (`pair_num_tokens`): a query ranked against five documents counts five times."""

from __future__ import annotations

import time
import uuid

from fastapi import APIRouter, Request
from fastapi.responses import Response

from model_optimizer.runtime.embed.scoring import (
    cosine_scores,
    distinct_inputs,
    pair_num_tokens,
    pair_separator,
    score_pairs,
)
from model_optimizer.runtime.server.body import ParsedBodyRoute
from model_optimizer.runtime.server.errors import APIError
from model_optimizer.runtime.server.protocol_score import RerankRequest, ScoreRequest
from model_optimizer.runtime.server.request_group import ClientDisconnected
from model_optimizer.runtime.server.routes import ERROR_RESPONSES
from model_optimizer.runtime.server.routes.embeddings import EmbedOptions, checked_inputs, embed_inputs
from model_optimizer.runtime.server.state import ServerState, get_state

router = APIRouter(route_class=ParsedBodyRoute)  # bodies parsed off the event loop (body.py)


@router.post("/score", response_model=dict, responses=ERROR_RESPONSES)
@router.post("/v1/score", response_model=dict, responses=ERROR_RESPONSES)
async def create_score(body: ScoreRequest, request: Request) -> dict | Response:
    state = _scoring_state(request, body.model)
    (first, value_1), (second, value_2) = body.sides()
    firsts = checked_inputs(value_1, state.config.max_embedding_inputs, first)
    seconds = checked_inputs(value_2, state.config.max_embedding_inputs, second)
    try:
        pairs = score_pairs(firsts, seconds)
    except ValueError as exc:
        raise APIError(400, str(exc), second) from None
    one = len(firsts) == 1
    names = [(first if one else f"{first}[{i}]", f"{second}[{i}]") for i in range(len(pairs))]
    scored = await _scores(state, request, pairs, names, body.truncate_prompt_tokens)
    if scored is None:
        return Response(status_code=499)
    scores, num_tokens = scored
    return {
        "id": f"score-{uuid.uuid4().hex}",
        "object": "list",
        "created": int(time.time()),
        "model": state.model.name,
        "data": [{"index": i, "object": "score", "score": score} for i, score in enumerate(scores)],
        "usage": {"prompt_tokens": num_tokens, "total_tokens": num_tokens, "completion_tokens": 0},
    }


@router.post("/rerank", response_model=dict, responses=ERROR_RESPONSES)
@router.post("/v1/rerank", response_model=dict, responses=ERROR_RESPONSES)
@router.post("/v2/rerank", response_model=dict, responses=ERROR_RESPONSES)
async def create_rerank(body: RerankRequest, request: Request) -> dict | Response:
    state = _scoring_state(request, body.model)
    checked_inputs(body.query, 1, "query")
    if not body.documents:
        raise APIError(400, "documents is empty: give at least one document to rank", "documents")
    documents = checked_inputs(body.documents, state.config.max_embedding_inputs, "documents")
    names = [("query", f"documents[{i}]") for i in range(len(documents))]
    scored = await _scores(state, request, score_pairs(body.query, documents), names, body.truncate_prompt_tokens)
    if scored is None:
        return Response(status_code=499)
    scores, num_tokens = scored
    ranked = sorted(range(len(documents)), key=lambda i: scores[i], reverse=True)[: body.top_n or None]
    return {
        "id": f"rerank-{uuid.uuid4().hex}",
        "model": state.model.name,
        "usage": {"prompt_tokens": num_tokens, "total_tokens": num_tokens},
        "results": [
            {"index": i, "document": {"text": body.documents[i]}, "relevance_score": scores[i]} for i in ranked
        ],
    }


def _scoring_state(request: Request, model: str | None) -> ServerState:
    state = get_state(request)
    state.check_model(model)
    state.check_accepting()
    if state.embedder is None:
        raise APIError(
            400, f"the model `{state.model.name}` is not an embedding model: scores are its embeddings' cosine", "model"
        )
    return state


async def _scores(
    state: ServerState, request: Request, pairs: list, names: list[tuple[str, str]], truncate_prompt_tokens: int | None
) -> tuple[list[float], int] | None:
    """(each pair's cosine similarity, the usage's tokens, counted per pair), or None when the client hung up;
    an error names the request's field and position (`names`: each pair's, as ("text_1", "text_2[3]"))."""
    inputs, index, input_names = distinct_inputs(pairs, names)
    if len(inputs) > state.config.max_embedding_inputs:
        most = state.config.max_embedding_inputs
        raise APIError(400, f"got {len(inputs)} distinct texts; at most {most}", names[0][1].split("[")[0])
    try:
        options = EmbedOptions(truncate_prompt_tokens=truncate_prompt_tokens)
        out = await embed_inputs(state, request, inputs, options, input_names)
    except ClientDisconnected:
        return None
    num_separator_tokens = len(pair_separator(state.embedder.tokenizer))
    return cosine_scores(out.embeddings, index), pair_num_tokens(out.num_tokens, index, num_separator_tokens)
