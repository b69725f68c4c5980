"""What the rules look at: the checkpoint as read, its census, and the engine loader's verdict on
its keys as they are and as `--fix` would leave them."""

from __future__ import annotations

import os
import shlex
from dataclasses import dataclass, field
from pathlib import Path

from model_optimizer.model.inspect.census import Census
from model_optimizer.model.inspect.checkpoint import Checkpoint
from model_optimizer.model.inspect.consumption import LoadCheck


@dataclass
class InspectContext:
    checkpoint: Checkpoint
    census: Census
    raw_check: LoadCheck
    """The engine loader over the keys as they are in the files."""
    clean_check: LoadCheck
    """The same after `--fix` (prefixes stripped, leftovers dropped, LoRA merged)."""
    max_model_len: int | None = None
    """The context the user means to serve, if given."""
    junk: list[str] = field(default_factory=list)
    """Tensors (as named in the files) no parameter takes, which `--fix` drops (cleaning.junk_names)."""

    @property
    def encoder(self) -> bool:
        """An encoder (BERT family): served for embeddings, so the generation rules (rope, eos, chat
        template) do not apply to it."""
        from model_optimizer.model.inspect.consumption import is_encoder_config

        return is_encoder_config(self.checkpoint.config)

    def fix_command(self, *options: str) -> str:
        folder = self.checkpoint.folder
        out = clean_copy_path(folder)
        return " ".join(["mopt inspect", shlex.quote(str(folder)), "--fix", shlex.quote(str(out)), *options])


def clean_copy_path(folder: Path) -> Path:
    """Where the suggested --fix writes: beside the checkpoint, unless that is inside the installed
    package (the built-in model), a Hugging Face cache snapshot (named by its repository) or not
    writable; then in the current folder."""
    import model_optimizer

    package = Path(model_optimizer.__file__).resolve().parent
    parent = folder.resolve().parent
    if parent.name == "snapshots" and parent.parent.name.startswith("models--"):
        return Path(f"{parent.parent.name.split('--')[-1]}-clean")  # models--Qwen--Qwen3-0.6B/snapshots/<commit>
    if package in (parent, *parent.parents) or not os.access(parent, os.W_OK):
        return Path(f"{folder.name}-clean")
    return folder.parent / f"{folder.name}-clean"
