"""vLLM's PoolingParams, as far as embeddings read it: `LLM.embed(prompts, pooling_params=PoolingParams(...))`."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class PoolingParams:
    dimensions: int | None = None
    """The first N dimensions, renormalized (models trained for it); None: all."""
    truncate_prompt_tokens: int | None = None
    """Keep each input's last k tokens (-1: as many as the model reads); None: a longer input is an error."""
