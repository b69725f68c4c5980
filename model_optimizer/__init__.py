"""Model-Optimizer: from a Hugging Face checkpoint to a fast, correct, monitored service.

Public API, named as vLLM's top level names it (code written for vLLM changes only its import line): `LLM`,
`SamplingParams`, `BeamSearchParams`, `PoolingParams`, `EngineConfig`, the prompt dicts `TextPrompt` and
`TokensPrompt`, and the outputs `RequestOutput`, `CompletionOutput`, `EmbeddingRequestOutput`,
`PoolingRequestOutput` and `ScoringRequestOutput`. Imports are lazy, so `import model_optimizer` (and the
torch-free engine core) stays cheap.
"""

from __future__ import annotations

import importlib
from typing import Any

from model_optimizer.common.version import __version__

_PUBLIC = {
    "LLM": "model_optimizer.runtime.llm",
    "SamplingParams": "model_optimizer.runtime.sampling_params",
    "BeamSearchParams": "model_optimizer.runtime.beam_search",
    "PoolingParams": "model_optimizer.runtime.pooling_params",
    "EngineConfig": "model_optimizer.runtime.config",
    "TextPrompt": "model_optimizer.runtime.llm_inputs",
    "TokensPrompt": "model_optimizer.runtime.llm_inputs",
    "RequestOutput": "model_optimizer.runtime.engine.outputs",
    "CompletionOutput": "model_optimizer.runtime.engine.outputs",
    "EmbeddingRequestOutput": "model_optimizer.runtime.engine.outputs",
    "ScoringRequestOutput": "model_optimizer.runtime.engine.outputs",
    "PoolingRequestOutput": "model_optimizer.runtime.llm_embed",
}
"""Each public name -> the module that defines it, imported when the name is first read."""

__all__ = [*_PUBLIC, "__version__"]


def __getattr__(name: str) -> Any:
    module = _PUBLIC.get(name)
    if module is None:
        raise AttributeError(f"module 'model_optimizer' has no attribute {name!r}")
    return getattr(importlib.import_module(module), name)
