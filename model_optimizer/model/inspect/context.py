"""What the rules look at: the checkpoint as read, its census, and the engine loader's verdict on
its keys as they are and as `--fix` would leave them."""

from __future__ import annotations

import shlex
from dataclasses import dataclass

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

    def fix_command(self, *options: str) -> str:
        folder = self.checkpoint.folder
        out = folder.parent / f"{folder.name}-clean"
        return " ".join(["mopt inspect", shlex.quote(str(folder)), "--fix", shlex.quote(str(out)), *options])
