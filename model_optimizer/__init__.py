"""Model-Optimizer: from a Hugging Face checkpoint to a fast, correct, monitored service.

Public API: `LLM`, `SamplingParams`, `BeamSearchParams`, `PoolingParams`, `EngineConfig`. Imports are lazy, so `import model_optimizer`
(and the torch-free engine core) stays cheap.
"""

from __future__ import annotations

from typing import Any

from model_optimizer.common.version import __version__

__all__ = ["LLM", "SamplingParams", "BeamSearchParams", "PoolingParams", "EngineConfig", "__version__"]


def __getattr__(name: str) -> Any:
    if name == "LLM":
        from model_optimizer.runtime.llm import LLM

        return LLM
    if name == "SamplingParams":
        from model_optimizer.runtime.sampling_params import SamplingParams

        return SamplingParams
    if name == "BeamSearchParams":
        from model_optimizer.runtime.beam_search import BeamSearchParams

        return BeamSearchParams
    if name == "PoolingParams":
        from model_optimizer.runtime.pooling_params import PoolingParams

        return PoolingParams
    if name == "EngineConfig":
        from model_optimizer.runtime.config import EngineConfig

        return EngineConfig
    raise AttributeError(f"module 'model_optimizer' has no attribute {name!r}")
