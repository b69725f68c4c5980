"""A model folder's tokenizer (transformers' AutoTokenizer), or None for a token-ids-only folder."""

from __future__ import annotations

from pathlib import Path
from typing import Any

TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "tokenizer.model", "vocab.txt", "vocab.json")


def load_tokenizer(path: Path, required: bool = True) -> Any:
    """The folder's tokenizer; None when it has none and none is required (token-id prompts only)."""
    from transformers import AutoTokenizer

    if not required and not any((path / name).is_file() for name in TOKENIZER_FILES):
        return None
    try:
        return AutoTokenizer.from_pretrained(str(path))
    except (OSError, ValueError) as exc:
        raise FileNotFoundError(f"no usable tokenizer in {path}: {exc}") from exc
