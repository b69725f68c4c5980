"""Which `dimensions` (Matryoshka truncation) a model takes: the one check every entry point shares.

`Embedder.encode` / `embed` / `aencode`, `LLM.embed` (also through `PoolingParams(dimensions=...)`),
`mopt embed --dimensions` and the server's `dimensions` all go through `check_dimensions`, so each refuses
alike: a model not trained to be cut short (cutting its vectors silently loses quality), or a length its
config does not list.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

MATRYOSHKA_KEYS = ("matryoshka_dimensions", "matryoshka_dims", "is_matryoshka")
"""Keys by which config.json or config_sentence_transformers.json declare training for truncation."""


def declared_dimensions(model_dir: str | Path) -> list[int] | bool | None:
    """The lengths the folder's config lists (matryoshka_dimensions / matryoshka_dims), True when it says
    is_matryoshka without a list, None when it declares no Matryoshka training."""
    for name in ("config.json", "config_sentence_transformers.json"):
        try:
            config = json.loads((Path(model_dir) / name).read_text())
        except (OSError, ValueError):
            continue
        if not isinstance(config, dict):
            continue
        dims = config.get("matryoshka_dimensions", config.get("matryoshka_dims"))
        if isinstance(dims, list) and dims:
            return dims
        if config.get("is_matryoshka") is True:
            return True
    return None


def supports_dimensions(model_dir: str | Path, is_encoder: bool) -> bool:
    """A decoder embedder (Qwen3-Embedding family, trained for truncation) or a model whose config
    declares Matryoshka training."""
    return not is_encoder or declared_dimensions(model_dir) is not None


def check_dimensions(dimensions: Any, hidden_size: int, is_encoder: bool, declared: list[int] | bool | None) -> None:
    """ValueError naming `dimensions` when it is no integer in 1..hidden_size, the model was not trained to
    be cut short (an encoder whose config declares nothing: `declared` None), or the config lists the
    lengths it was trained for and this is not one of them."""
    if dimensions is None:
        return
    if isinstance(dimensions, bool) or not isinstance(dimensions, int) or not 1 <= dimensions <= hidden_size:
        raise ValueError(f"dimensions must be an integer between 1 and {hidden_size}, got {dimensions!r}")
    if is_encoder and declared is None:
        raise ValueError(
            "dimensions is not supported by this model: its config declares no Matryoshka training "
            f"({' / '.join(MATRYOSHKA_KEYS)}), so shortened vectors would lose quality"
        )
    if isinstance(declared, list) and dimensions not in declared:
        raise ValueError(f"dimensions must be one of {declared} for this model, got {dimensions}")
