"""A model folder's tokenizer, or None for a token-ids-only folder.

The `tokenizers` library alone (fast_tokenizer.py) when it reproduces transformers exactly, which
keeps transformers' seconds-long import out of `mopt serve`; transformers' AutoTokenizer otherwise,
with the reason logged. MOPT_TOKENIZER=transformers forces AutoTokenizer (to compare the two)."""

from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import Any

from model_optimizer.runtime.models.fast_tokenizer import open_fast_tokenizer

TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "tokenizer.model", "vocab.txt", "vocab.json")

BACKEND_ENV = "MOPT_TOKENIZER"
"""Environment variable: "transformers" always loads AutoTokenizer; unset or "auto" prefers tokenizers."""

logger = logging.getLogger(__name__)


def has_tokenizer_files(folder: Path) -> bool:
    """Whether `folder` holds any of TOKENIZER_FILES (without them transformers makes up an empty tokenizer)."""
    return any((folder / name).is_file() for name in TOKENIZER_FILES)


def load_tokenizer(path: Path, required: bool = True) -> Any:
    """The folder's tokenizer (a Hugging Face Hub id resolves to its snapshot, runtime/hub.py); None when it
    has none and none is required (token-id prompts only)."""
    path = Path(path)
    if not path.is_dir():
        from model_optimizer.runtime.hub import resolve_model

        path = resolve_model(str(path))
    if not required and not has_tokenizer_files(path):
        return None
    backend = os.environ.get(BACKEND_ENV, "auto").strip().lower() or "auto"
    if backend not in ("auto", "transformers"):
        raise ValueError(f"{BACKEND_ENV}={backend!r}: use 'auto' (tokenizers when it suffices) or 'transformers'")
    if backend == "auto":
        tokenizer, reason = open_fast_tokenizer(path)
        if tokenizer is not None:
            return tokenizer
        logger.info("tokenizer of %s loaded through transformers: %s", path, reason)
    return load_transformers_tokenizer(path)


def load_transformers_tokenizer(path: Path) -> Any:
    """transformers' AutoTokenizer for the folder (the reference the fast tokenizer is tested against)."""
    from transformers import AutoTokenizer

    try:
        return AutoTokenizer.from_pretrained(str(path))
    except (OSError, ValueError) as exc:
        raise FileNotFoundError(f"no usable tokenizer in {path}: {exc}") from exc
    except ImportError as exc:  # its tokenizer class needs a package (fugashi, sentencepiece ...): the files are fine
        raise ValueError(f"the tokenizer of {path} needs a package that is not installed: {exc}") from exc
    except Exception as exc:  # noqa: BLE001 - a malformed file fails deep inside transformers or tokenizers
        # (a list where an object belongs, an id for a token's text, JSON tokenizers cannot parse): the
        # user's files to repair, so one line naming the folder rather than their traceback
        raise ValueError(
            f"the tokenizer files in {path} are malformed ({type(exc).__name__}: {exc}); "
            "compare them with the original model's"
        ) from exc
