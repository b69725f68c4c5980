"""Ending a run before its plan does: a signal (Ctrl-C, SIGTERM), or a server that refuses everything.

One `RunStop` per run and process, shared by the load loop and the client. Once stopped, no new
request is sent; requests in flight get `GRACE_S` to finish, then are cancelled and recorded with
error `cancelled` (a second signal cancels them at once). The run's records so far are then saved
as a normal run marked `interrupted` (runner.py).

Fail fast: when the first `FAIL_FAST_REQUESTS` requests to finish all failed with the same HTTP
401, 403 or 404, the server refuses this client (a wrong key, model or path) and every later request
would fail the same way: the run stops as on a signal, with no grace, and `mopt bench` exits 1.
"""

from __future__ import annotations

import asyncio
import contextlib
import signal
import threading

GRACE_S = 2.0
"""Seconds requests in flight may still finish after a stop signal before they are cancelled."""
FAIL_FAST_REQUESTS = 8
"""This many first finished requests all refused with one of FAIL_FAST_ERRORS stop the run."""
FAIL_FAST_ERRORS = ("http_401", "http_403", "http_404")
SIGNAL_EXIT_CODES = {"SIGINT": 130, "SIGTERM": 143}
"""128 + the signal's number, as a shell reports a process ended by it."""


class RunStop:
    """Whether and why one run stops early; the tasks of requests in flight, to cancel them."""

    def __init__(self, fail_fast: bool = True) -> None:
        self.reason: str | None = None
        """None while the run goes on; a signal's name (SIGINT, SIGTERM) or a fail-fast sentence."""
        self.cancelling = False
        """True once requests in flight are being cancelled: their CancelledError is a `cancelled` record."""
        self.num_unsent = 0
        """Arrivals of an open loop that were never sent (the run stopped, or --duration ended, first)."""
        self.fail_fast = fail_fast
        self._event = asyncio.Event()
        self._in_flight: set[asyncio.Task] = set()
        self._first_errors: list[str | None] = []
        self._listeners: list = []

    def is_set(self) -> bool:
        return self.reason is not None

    def stop(self, reason: str, grace: float = GRACE_S) -> None:
        """Stop sending; cancel requests in flight after `grace` seconds (a second call: now)."""
        for listener in self._listeners:  # a second call too: worker processes cancel theirs at once
            listener(reason)
        if self.reason is not None:
            self.cancel_in_flight()
            return
        self.reason = reason
        self._event.set()
        if grace <= 0:
            self.cancel_in_flight()
        else:
            asyncio.get_running_loop().call_later(grace, self.cancel_in_flight)

    def on_stop(self, listener) -> None:
        """Call `listener(reason)` on every stop() (the parent tells its worker processes)."""
        self._listeners.append(listener)

    def cancel_in_flight(self) -> None:
        self.cancelling = True
        for task in list(self._in_flight):
            task.cancel()

    async def sleep(self, delay: float) -> None:
        """Sleep `delay` seconds, or less when the run stops meanwhile."""
        if delay <= 0.05 or self.is_set():  # short: a plain sleep costs the loop less than a wait task
            await asyncio.sleep(max(0.0, delay))
            return
        try:
            await asyncio.wait_for(self._event.wait(), delay)
        except asyncio.TimeoutError:
            pass

    def track(self, task: asyncio.Task | None) -> None:
        if task is not None:
            self._in_flight.add(task)

    def untrack(self, task: asyncio.Task | None) -> None:
        self._in_flight.discard(task)

    def observe(self, error: str | None) -> None:
        """Count one finished request's error (None: success) towards the fail-fast rule."""
        if not self.fail_fast or len(self._first_errors) >= FAIL_FAST_REQUESTS:
            return
        self._first_errors.append(error)
        reason = fail_fast_reason(self._first_errors)
        if reason:
            self.stop(reason, grace=0)


def fail_fast_reason(errors: list[str | None]) -> str | None:
    """The fail-fast sentence when `errors` (of the first finished requests) are FAIL_FAST_REQUESTS
    times one of FAIL_FAST_ERRORS, else None."""
    first = errors[:FAIL_FAST_REQUESTS]
    if len(first) < FAIL_FAST_REQUESTS or first[0] not in FAIL_FAST_ERRORS or len(set(first)) != 1:
        return None
    return f"the first {FAIL_FAST_REQUESTS} requests all failed with {first[0]}: stopped sending"


class Interrupted(Exception):
    """SIGINT or SIGTERM stopped the benchmark; the run in progress was saved, marked interrupted."""

    def __init__(self, signal_name: str) -> None:
        super().__init__(signal_name)
        self.signal_name = signal_name
        self.exit_code = SIGNAL_EXIT_CODES.get(signal_name, 130)


class RunAborted(Exception):
    """The server refused every request the same way (stopping.py's fail-fast rule); the run was saved."""


@contextlib.contextmanager
def signal_handlers(on_signal):
    """SIGINT and SIGTERM call `on_signal(name)` instead of ending the process (main thread only: `mopt
    tune` runs the bench in a thread, where the default handling stays)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, on_signal, sig.name)
    try:
        yield
    finally:
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.remove_signal_handler(sig)
