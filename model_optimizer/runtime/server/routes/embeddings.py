"""POST /v1/embeddings: input as text, texts, token ids or lists of token ids; float or base64 vectors.

Served when the model is an embedding model (`ServerState.embedder`, a model_optimizer.runtime.embed
Embedder); otherwise a clear 400. The Embedder tokenizes, applies `dimensions` (Matryoshka
truncation, then renormalization) and counts tokens itself; it runs in a worker thread. `dimensions`
is taken only from models trained for it: decoder embedders (Qwen3-Embedding family) and models whose
config declares Matryoshka training.
"""

from __future__ import annotations

import base64
import functools
import json
from pathlib import Path
from typing import Any

from fastapi import APIRouter, Request

from model_optimizer.common.text import not_utf8_at
from model_optimizer.runtime.embed.inputs import BLANK_HINT, is_blank
from model_optimizer.runtime.server.body import ParsedBodyRoute
from model_optimizer.runtime.server.errors import APIError
from model_optimizer.runtime.server.prompts import prompt_list
from model_optimizer.runtime.server.protocol import EmbeddingRequest
from model_optimizer.runtime.server.routes import ERROR_RESPONSES
from model_optimizer.runtime.server.state import get_state

router = APIRouter(route_class=ParsedBodyRoute)  # bodies parsed off the event loop (body.py)


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
    empty = next((i for i, item in enumerate(inputs) if _empty(item)), None)
    if empty is not None:
        raise APIError(400, f"input {empty} is {BLANK_HINT}: every input needs visible text or token ids", "input")
    if len(inputs) > state.config.max_embedding_inputs:
        raise APIError(
            400, f"got {len(inputs)} inputs; at most {state.config.max_embedding_inputs} per request", "input"
        )
    if any(isinstance(i, str) and not_utf8_at(i) is not None for i in inputs):
        raise APIError(400, "input is not valid Unicode text (lone surrogate)", "input")
    if body.dimensions is not None:
        check_dimensions(state.embedder, body.dimensions)
    try:
        out = await state.embedder.aencode(
            inputs, dimensions=body.dimensions, truncate_prompt_tokens=body.truncate_prompt_tokens
        )
    except ValueError as exc:
        param = "truncate_prompt_tokens" if str(exc).startswith("truncate_prompt_tokens") else "input"
        raise APIError(400, str(exc), param) from None
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


MATRYOSHKA_KEYS = ("matryoshka_dimensions", "matryoshka_dims", "is_matryoshka")
"""Keys by which config.json or config_sentence_transformers.json declare training for truncation."""


def check_dimensions(embedder: Any, dimensions: int) -> None:
    """400 naming `dimensions` when it is out of range or the model was not trained to be cut short
    (truncating such a model's vectors silently loses quality)."""
    if dimensions > embedder.hidden_size:
        raise APIError(400, f"dimensions must be between 1 and {embedder.hidden_size}, got {dimensions}", "dimensions")
    if not supports_dimensions(embedder.model_dir, embedder.is_encoder):
        raise APIError(
            400,
            "dimensions is not supported by this model: its config declares no Matryoshka training "
            f"({' / '.join(MATRYOSHKA_KEYS)}), so shortened vectors would lose quality",
            "dimensions",
        )
    allowed = _declared(Path(embedder.model_dir)).get("matryoshka_dimensions")
    if isinstance(allowed, list) and allowed and dimensions not in allowed:
        raise APIError(400, f"dimensions must be one of {allowed} for this model, got {dimensions}", "dimensions")


def supports_dimensions(model_dir: str | Path, is_encoder: bool) -> bool:
    """A decoder embedder (Qwen3-Embedding family, trained for truncation) or a model whose config
    declares Matryoshka training."""
    return not is_encoder or bool(_declared(Path(model_dir)))


@functools.lru_cache(maxsize=8)
def _declared(model_dir: Path) -> dict[str, Any]:
    """{"matryoshka_dimensions": list or True} when the folder declares Matryoshka training, else {}."""
    for name in ("config.json", "config_sentence_transformers.json"):
        try:
            config = json.loads((model_dir / name).read_text())
        except (OSError, ValueError):
            continue
        if not isinstance(config, dict):
            continue
        dims = config.get("matryoshka_dimensions", config.get("matryoshka_dims"))
        if isinstance(dims, list) and dims:
            return {"matryoshka_dimensions": dims}
        if config.get("is_matryoshka") is True:
            return {"matryoshka_dimensions": True}
    return {}


def _empty(item: str | list[int]) -> bool:
    return len(item) == 0 or (isinstance(item, str) and is_blank(item))


def _encode(vector, encoding_format: str) -> list[float] | str:
    """float: a JSON list; base64: little-endian float32 bytes, as OpenAI sends them."""
    if encoding_format == "base64":
        return base64.b64encode(vector.numpy().astype("<f4").tobytes()).decode()
    return vector.tolist()
