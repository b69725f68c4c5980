"""Progress through a batch of items: a rich bar on a terminal; elsewhere (a log, a pipe) a plain line at the
first item, at every tenth of the batch and at the last."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any


@contextmanager
def batch_progress(
    console: Any, total: int, label: str, log: Callable[[str], None], unit: str = "prompts"
) -> Iterator[Callable[..., None]]:
    """Yields `advance(count=1)`, to call as items finish. `label` names the work on the bar ("generating");
    `log` writes a plain line ("3/30 prompts done") where there is no terminal."""
    if console.is_terminal:
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

        with Progress(
            TextColumn(label), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(), console=console
        ) as bar:
            task = bar.add_task(label, total=total)
            yield lambda count=1: bar.advance(task, count)
        return
    every = max(1, total // 10)
    done = 0

    def advance(count: int = 1) -> None:
        nonlocal done
        before, done = done, done + count
        if before == 0 or done // every > before // every or done == total:
            log(f"{done}/{total} {unit} done")

    yield advance
