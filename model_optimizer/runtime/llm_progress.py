"""The offline API's progress display, as vLLM's `use_tqdm` asks for it: ours on stderr, a bar from the
caller's own factory, or none."""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any


@contextmanager
def offline_progress(total: int, shown: bool | Callable[..., Any], label: str) -> Iterator[Callable[..., None]]:
    """The offline API's progress display (common.progress.batch_progress on stderr; plain lines start
    with `label`), a bar from a factory with tqdm's signature (vLLM's use_tqdm may be one), or a no-op."""
    if not shown:
        yield lambda count=1: None
        return
    if callable(shown):
        bar = shown(total=total, desc=label)
        try:
            yield lambda count=1: bar.update(count)
        finally:
            bar.close()
        return
    from rich.console import Console

    from model_optimizer.common.progress import batch_progress

    def log(line: str) -> None:
        print(f"{label}: {line}", file=sys.stderr, flush=True)

    with batch_progress(Console(stderr=True), total, label, log) as advance:
        yield advance
