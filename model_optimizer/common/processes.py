"""Child processes that never outlive their parent (the engine core and the tensor-parallel workers),
and the cores this process may run on.

A process killed with SIGKILL runs no clean-up, so a child cannot rely on being told to go: each
child watches its parent itself, from a thread that polls the parent's pid. (Linux's
PR_SET_PDEATHSIG would be quicker, but it fires when the *thread* that started the child ends,
which a server started from a worker thread would trip over.)
"""

from __future__ import annotations

import gc
import os
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager

PARENT_POLL_S = 0.5


def exit_with_parent(parent_pid: int, exit_code: int = 3, before_exit: Callable[[], None] | None = None) -> None:
    """End this process (exit code `exit_code`) within PARENT_POLL_S of `parent_pid` no longer being its
    parent, even while its main thread is blocked (in a collective, a socket poll); `before_exit` runs
    first (clean-up no one else would do once the parent is gone)."""
    args = (parent_pid, exit_code, before_exit)
    threading.Thread(target=_poll, args=args, daemon=True, name="parent-watch").start()


def _poll(parent_pid: int, exit_code: int, before_exit: Callable[[], None] | None) -> None:
    while os.getppid() == parent_pid:
        time.sleep(PARENT_POLL_S)
    if before_exit is not None:
        before_exit()
    os._exit(exit_code)


def freeze_startup_objects() -> None:
    """Move everything start-up made (torch, FastAPI and model objects: millions) out of the garbage
    collector's sight. A serving loop allocates small objects at a high rate, and every full collection
    would otherwise walk all of them again: tens of milliseconds, landing in random steps."""
    gc.collect()
    gc.freeze()


def unfreeze_objects() -> None:
    """Undo freeze_startup_objects before shutting down, so extension objects are released the usual way
    (nanobind-based libraries report frozen ones as leaks at exit)."""
    gc.unfreeze()


def usable_cores() -> int:
    """The cores this process may run on (its affinity), else the machine's."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


@contextmanager
def environment_set(name: str, value: str) -> Iterator[None]:
    """`name` set to `value` in this process's environment for the block (child processes started in it
    inherit it), then put back as it was."""
    previous = os.environ.get(name)
    os.environ[name] = value
    try:
        yield
    finally:
        if previous is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = previous


@contextmanager
def sigterm_raises(exception: type[BaseException]) -> Iterator[None]:
    """Inside the block, SIGTERM (`kill`, `timeout`, a batch scheduler) raises `exception` in the main thread
    instead of ending the process at once, so the command's own clean-up and saving run; the previous
    handler comes back after. Off the main thread (which alone may set handlers) nothing changes."""
    import signal

    def handler(signum: int, frame: object) -> None:
        raise exception

    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.signal(signal.SIGTERM, handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


@contextmanager
def interrupts_deferred() -> Iterator[None]:
    """SIGINT and SIGTERM that come inside the block are acted on at its end, by the handlers they had before
    it, so a short step that must not stop halfway (the renames that publish a result) finishes first. A
    Python-level deferral: blocking the signals in this thread would not hold them, as another thread
    may take a process's signal and Python then runs the handler here anyway. Off the main thread
    (which alone may set handlers) nothing changes."""
    import signal

    if threading.current_thread() is not threading.main_thread():
        yield
        return
    pending: list[int] = []
    previous = {sig: signal.getsignal(sig) for sig in (signal.SIGINT, signal.SIGTERM)}
    for sig in previous:
        signal.signal(sig, lambda signum, frame: pending.append(signum))
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        if pending:
            handler = previous[pending[0]]
            if callable(handler):
                handler(pending[0], None)
            elif handler == signal.SIG_DFL:
                os.kill(os.getpid(), pending[0])  # the default action, now that it is back
