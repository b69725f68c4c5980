"""Embedding models: BertModel-family encoders and decoder embedders (Qwen3-Embedding style).

`Embedder(model_dir, **EmbedConfig fields).embed(texts)`; see embedder.py.
"""

from model_optimizer.embed.config import EmbedConfig
from model_optimizer.embed.embedder import Embedder, EmbedOutput

__all__ = ["EmbedConfig", "Embedder", "EmbedOutput"]
