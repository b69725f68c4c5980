"""Ctrl-C, SIGTERM and SIGHUP during a study, never in the middle of a write to study.db.

A KeyboardInterrupt raised inside optuna's storage (SQLAlchemy over SQLite) can leave that call's
connection with a statement half read and its lock held: the next write, the one that marks the
trial interrupted, then waits on a lock this same thread holds and fails ("database is locked"), and
`mopt tune` ends with a traceback instead of exit 130. So while a study runs, a signal that arrives
during a storage call is noted and raised as KeyboardInterrupt once the call has returned; anywhere
else it is raised at once, as usual (a trial's measurement stops at the next bytecode). SIGHUP (the
terminal closed, an ssh session lost) is one more way to stop a study: its default would end the tuner
without stopping the trial's server, which runs in a session of its own.
"""

from __future__ import annotations

import functools
import inspect
import signal
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

INTERRUPTS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


class DeferredInterrupts:
    """SIGINT/SIGTERM/SIGHUP as KeyboardInterrupt, held back while `deferred()` blocks run (main thread only)."""

    def __init__(self) -> None:
        self._depth = 0
        self._pending = False

    def handler(self, signum: int, frame: Any) -> None:
        if self._depth:
            self._pending = True
            return
        raise KeyboardInterrupt

    @contextmanager
    def deferred(self) -> Iterator[None]:
        self._depth += 1
        try:
            yield
        finally:
            self._depth -= 1
            if not self._depth and self._pending:
                self._pending = False
                raise KeyboardInterrupt

    def wrap(self, method: Callable) -> Callable:
        @functools.wraps(method)
        def call(*args: Any, **kwargs: Any) -> Any:
            with self.deferred():
                return method(*args, **kwargs)

        return call


@contextmanager
def interrupts_outside(storage: Any) -> Iterator[None]:
    """For the block: SIGINT, SIGTERM and SIGHUP raise KeyboardInterrupt, but never inside a method of `storage`
    (the study's storage: every trial, the study and the samplers reach the file through it). The
    handlers and the storage's methods are restored when the block ends."""
    interrupts = DeferredInterrupts()
    names = [name for name, _ in inspect.getmembers(type(storage), inspect.isfunction) if not name.startswith("__")]
    for name in names:  # instance attributes over the class's methods: this storage object only
        setattr(storage, name, interrupts.wrap(getattr(storage, name)))
    previous = {sig: signal.signal(sig, interrupts.handler) for sig in INTERRUPTS}
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        for name in names:
            delattr(storage, name)
