"""vLLM's PoolingParams, as far as embeddings read it: `LLM.embed(prompts, pooling_params=PoolingParams(...))`."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class PoolingParams:
    dimensions: int | None = None
    """The first N dimensions, renormalized unless normalize is False (models trained for it); None: all."""
    truncate_prompt_tokens: int | None = None
    """Cut each input to k tokens, keeping its beginning (a text keeps its closing special tokens too; -1: as
    many as the model reads); None: a longer input is an error."""
    normalize: bool | None = None
    """L2-normalize the pooled vectors; False: return them as pooled; None: as the model folder says."""
