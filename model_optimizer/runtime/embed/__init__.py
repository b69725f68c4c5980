"""Embedding models: BertModel-family encoders and decoder embedders (Qwen3-Embedding style).

`Embedder(model_dir, **EmbedConfig fields).embed(texts)`; see embedder.py.

The package imports nothing heavy itself: `mopt`'s parser reads `model_optimizer.runtime.embed.config`
for every command, and importing the embedder would pull torch (seconds) into `mopt --help`.
`Embedder` and `EmbedOutput` load on first access.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from model_optimizer.runtime.embed.config import EmbedConfig

if TYPE_CHECKING:
    from model_optimizer.runtime.embed.embedder import Embedder, EmbedOutput

__all__ = ["EmbedConfig", "Embedder", "EmbedOutput"]

_LAZY = {"Embedder", "EmbedOutput"}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        from model_optimizer.runtime.embed import embedder

        return getattr(embedder, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
