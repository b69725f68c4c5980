"""Progress through a batch of items: a rich bar on a terminal; elsewhere (a log, a pipe) a plain line at the
first item, at every tenth of the batch and at the last."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any


@contextmanager
def batch_progress(console: Any, total: int, label: str, log: Callable[[str], None]) -> Iterator[Callable[[], None]]:
    """Yields `advance()`, to call once per finished item. `label` names the work on the bar ("generating");
    `log` writes a plain line ("3/30 prompts done") where there is no terminal."""
    if console.is_terminal:
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

        with Progress(
            TextColumn(label), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(), console=console
        ) as bar:
            task = bar.add_task(label, total=total)
            yield lambda: bar.advance(task)
        return
    every = max(1, total // 10)
    done = 0

    def advance() -> None:
        nonlocal done
        done += 1
        if done == 1 or done % every == 0 or done == total:
            log(f"{done}/{total} prompts done")

    yield advance
