"""The embedding side of `LLM`: its pooling methods (`embed`, `score`, `encode`, mixed into LLM as
`LLMPooling`), the embedder behind them, and embed's arguments (vLLM's prompt dicts and pooling_params)
brought to the embedder's shape.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from model_optimizer.runtime.config import EngineConfig
from model_optimizer.runtime.engine.outputs import (
    EmbeddingOutput,
    EmbeddingRequestOutput,
    ScoringOutput,
    ScoringRequestOutput,
)
from model_optimizer.runtime.llm_inputs import as_prompt, refuse_lora
from model_optimizer.runtime.llm_progress import offline_progress
from model_optimizer.runtime.pooling_params import PoolingParams

POOLING_TASKS = ("embed",)
"""The pooling tasks of vLLM's `LLM.encode` served here; vLLM's others (classify, score, token_embed,
token_classify) need heads or per-token outputs the embedder does not have."""


@dataclass
class PoolingOutput:
    """One input's pooled output (vLLM's PoolingOutput): `data`, a 1-D float32 torch tensor (an embedding)."""

    data: Any


@dataclass
class PoolingRequestOutput:
    """What LLM.encode returns per input, in vLLM's shape: `output.outputs.data`."""

    request_id: str
    outputs: PoolingOutput
    prompt_token_ids: list[int]
    finished: bool = True


class LLMPooling:
    """Mixed into LLM: the methods that pool with the embedder rather than generate with the engine."""

    config: EngineConfig
    model_dir: Path
    runner: Any
    _embedder: Any
    _ids: Iterator[int]
    _check_open: Callable[[], None]

    def embed(
        self,
        prompts: str | list[int] | dict | Sequence[str | list[int] | dict],
        dimensions: int | None = None,
        truncate_prompt_tokens: int | None = None,
        instruction: str | None = None,
        *,
        use_tqdm: bool = True,
        pooling_params: PoolingParams | Sequence[PoolingParams] | None = None,
        lora_request: None = None,
    ) -> list[EmbeddingRequestOutput]:
        """Embeddings of texts (or token-id lists, or vLLM's prompt dicts), pooled and normalized as the model
        folder says, as vLLM's `LLM.embed` returns them: one EmbeddingRequestOutput per input, the vector in
        `.outputs.embedding`, the ids the model read in `.prompt_token_ids`. `dimensions` and
        `truncate_prompt_tokens` may come in `pooling_params` (vLLM's way; one for every input), and so may
        `normalize` (False: the pooled vectors as they are).
        `use_tqdm`: progress as `generate` shows it. `lora_request` must be None (vLLM's keyword; no adapters).

        A decoder (Qwen3-Embedding style) embeds with the generation engine's own weights, in the
        engine's dtype: they are loaded once, and embedding reads no KV cache.
        """
        refuse_lora(lora_request)
        out = self._pooled(prompts, dimensions, truncate_prompt_tokens, instruction, use_tqdm, pooling_params)
        return [
            EmbeddingRequestOutput(str(next(self._ids)), EmbeddingOutput(vector), ids)
            for vector, ids in zip(out.embeddings.tolist(), out.token_ids or [])
        ]

    def _pooled(
        self,
        prompts: str | list[int] | dict | Sequence[str | list[int] | dict],
        dimensions: int | None,
        truncate_prompt_tokens: int | None,
        instruction: str | None,
        use_tqdm: bool | Callable[..., Any],
        pooling_params: PoolingParams | Sequence[PoolingParams] | None,
    ) -> Any:
        """The Embedder's EmbedOutput for embed, score and encode: the vectors as one float32 tensor (each
        caller shapes its own outputs from it) and the ids each input was read as."""
        self._check_open()
        if self._embedder is None:
            self._embedder = load_embedder(self.config, self.model_dir, self.runner)
        from model_optimizer.runtime.embed.inputs import as_input_list

        normalize = None
        if pooling_params is not None:
            dimensions, truncate_prompt_tokens, normalize = pooling_settings(
                pooling_params, dimensions, truncate_prompt_tokens
            )
        items = as_input_list(
            as_embed_inputs(prompts)
        )  # one text or token-id list, or several: the count the progress shows
        with offline_progress(len(items), use_tqdm, "LLM.embed") as advance:
            return self._embedder.encode(
                items,
                dimensions=dimensions,
                truncate_prompt_tokens=truncate_prompt_tokens,
                instruction=instruction,
                on_progress=advance,
                keep_token_ids=True,
                normalize=normalize,
            )

    def score(
        self,
        data_1: str | list[int] | Sequence[str | list[int]],
        data_2: str | list[int] | Sequence[str | list[int]],
        /,
        *,
        truncate_prompt_tokens: int | None = None,
        use_tqdm: bool | Callable[..., Any] = True,
        pooling_params: PoolingParams | None = None,
        lora_request: None = None,
    ) -> list[ScoringRequestOutput]:
        """Scores of text pairs by an embedding model, as vLLM's `LLM.score` gives them for one: the cosine
        similarity of the two texts' embeddings (runtime/embed/scoring.py), one ScoringRequestOutput per pair
        (`.outputs.score`; `.prompt_token_ids` the first text's ids, the tokenizer's pad token, then the
        second's, as vLLM's). `data_1` is one text (scored against every text of `data_2`) or as many texts as
        `data_2` holds (scored in pairs); texts may be token ids. Each distinct text is embedded once.
        `pooling_params` applies to every text, as in `embed`; `lora_request` must be None."""
        from model_optimizer.runtime.embed.scoring import cosine_scores, distinct_inputs, pair_separator, score_pairs

        refuse_lora(lora_request)
        inputs, pairs, _ = distinct_inputs(score_pairs(data_1, data_2))
        out = self._pooled(inputs, None, truncate_prompt_tokens, None, use_tqdm, pooling_params)
        scores = cosine_scores(out.embeddings, pairs)
        separator, ids = pair_separator(self._embedder.tokenizer), out.token_ids or []
        return [
            ScoringRequestOutput(str(next(self._ids)), ScoringOutput(score), ids[a] + separator + ids[b])
            for score, (a, b) in zip(scores, pairs)
        ]

    def encode(
        self,
        prompts: str | list[int] | dict | Sequence[str | list[int] | dict],
        pooling_params: PoolingParams | Sequence[PoolingParams] | None = None,
        *,
        truncate_prompt_tokens: int | None = None,
        use_tqdm: bool = True,
        lora_request: None = None,
        pooling_task: str | None = None,
    ) -> list[PoolingRequestOutput]:
        """vLLM's generic pooling entry, for the tasks served here (POOLING_TASKS): "embed" (None means it)
        pools as `embed` does, one PoolingRequestOutput per input with its vector in `.outputs.data` (a 1-D
        float32 torch tensor, as vLLM gives it). Another task is a ValueError naming the served ones;
        `lora_request` must be None."""
        refuse_lora(lora_request)
        if pooling_task is not None and pooling_task not in POOLING_TASKS:
            raise ValueError(
                f"pooling_task {pooling_task!r} is not supported: LLM.encode serves {', '.join(POOLING_TASKS)} "
                "(for similarity scores of an embedding model, use LLM.score)"
            )
        out = self._pooled(prompts, None, truncate_prompt_tokens, None, use_tqdm, pooling_params)
        return [
            PoolingRequestOutput(str(next(self._ids)), PoolingOutput(vector.clone()), ids)  # its own storage
            for vector, ids in zip(out.embeddings, out.token_ids or [])
        ]


EMBEDDING_SETTINGS = (
    "model",
    "tokenizer",
    "revision",
    "dtype",
    "load_format",
    "device",
    "max_model_len",
    "quantization",
)
"""EngineConfig fields an encoder (embedding) model reads, served by `mopt serve` or loaded by LLM
(quantization: to refuse it)."""


def unused_embedding_settings(config: EngineConfig) -> list[str]:
    """The engine settings given (not at their defaults) that an embedding model has no use for: no KV
    cache, scheduler, sampler, speculation or weight offload."""
    defaults = EngineConfig()
    return [
        name
        for name, value in vars(config).items()
        if name not in EMBEDDING_SETTINGS and value != getattr(defaults, name, value)
    ]


def warn_unused_embedding_settings(config: EngineConfig, log: logging.Logger) -> None:
    """Name the settings an embedding model ignores (unused_embedding_settings) in a warning on `log`, the
    same from `mopt serve` and from LLM; said rather than refused, as vLLM takes them."""
    ignored = unused_embedding_settings(config)
    if ignored:
        log.warning("settings that do not apply to an embedding model are ignored: %s", ", ".join(ignored))


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
