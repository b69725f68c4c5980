"""The embedding side of `LLM`: the embedder behind `LLM.embed` and `LLM.score`, and embed's arguments
(vLLM's prompt dicts and pooling_params) brought to the embedder's shape.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from model_optimizer.runtime.config import EngineConfig
from model_optimizer.runtime.llm_inputs import as_prompt
from model_optimizer.runtime.pooling_params import PoolingParams


def load_embedder(config: EngineConfig, model_dir: Path, runner: Any) -> Any:
    """The Embedder of `model_dir`: the encoder folder's own when `runner` is None, else one over the
    decoder the generation engine's `runner` holds, so that the weights load once and embed in the
    engine's dtype (embedding reads no KV cache). ValueError under tensor parallelism, where the weights
    live in worker processes."""
    if config.tensor_parallel_size > 1 and runner is not None:
        raise ValueError(
            "embed is not supported with tensor_parallel_size > 1 (the weights live in worker processes); "
            "embed with tensor_parallel_size 1"
        )
    from model_optimizer.runtime.embed import EmbedConfig, Embedder

    backbone, device = None, config.device
    if runner is not None:
        from model_optimizer.runtime.embed.backbone import DecoderBackbone

        backbone = DecoderBackbone(runner.model.model, runner.model.args).eval()
        device = runner.device.type
    # the engine's context bounds an input, as vLLM's max_model_len does its embeddings
    embed_config = EmbedConfig.from_engine(config, device=device, max_seq_length=config.max_model_len)
    return Embedder(model_dir, backbone=backbone, **vars(embed_config))


def as_embed_inputs(texts: Any) -> Any:
    """embed's input with vLLM's prompt dicts unpacked (one dict, or a list holding some); anything else as
    it was given, for the embedder's own input checks."""
    if isinstance(texts, dict):
        return [as_prompt(texts)]
    if isinstance(texts, (list, tuple)) and any(isinstance(t, dict) for t in texts):
        return [as_prompt(t) for t in texts]
    return texts


def pooling_settings(
    params: PoolingParams | Sequence[PoolingParams], dimensions: int | None, truncate_prompt_tokens: int | None
) -> tuple[int | None, int | None, bool | None]:
    """(dimensions, truncate_prompt_tokens, normalize) of vLLM's pooling_params, one for all inputs (a list of
    equal ones too), the same setting given twice refused unless equal."""
    if isinstance(params, (list, tuple)):
        if not params or any(p != params[0] for p in params):
            raise ValueError("pooling_params: give one PoolingParams for all inputs (embed runs them alike)")
        params = params[0]
    if not isinstance(params, PoolingParams):
        raise TypeError(f"pooling_params must be a PoolingParams, got {type(params).__name__}")
    for name, given in (("dimensions", dimensions), ("truncate_prompt_tokens", truncate_prompt_tokens)):
        value = getattr(params, name)
        if given is not None and value is not None and given != value:
            raise ValueError(f"{name} is {given} but pooling_params.{name} is {value}: give it once")
    return (
        params.dimensions if params.dimensions is not None else dimensions,
        params.truncate_prompt_tokens if params.truncate_prompt_tokens is not None else truncate_prompt_tokens,
        params.normalize,
    )
