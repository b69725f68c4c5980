"""HangWatch: a frontend's check that its engine-core process still answers.

A core that stops making progress (a stuck collective, a GPU that no longer returns, a process stopped
with SIGSTOP) is still alive to the process sentinel, so nothing else would notice: requests would hang
and /health would say 200 forever, and an orchestrator's liveness probe would never restart the server.

The rule: whenever the frontend has heard nothing from the core for a ping period, it sends a ping (a
STATS command, which the core answers between two steps, also while paused or held); the core counts as
hung once a ping has waited longer than the hang timeout. Anything the core sends is an answer, so a
core that is streaming outputs is never pinged, and the core's step loop does no work for the watch. A
long step delays the answer, so the timeout must exceed the longest step (a long prefill chunk, a CPU
model); it is generous by default and set with MOPT_ENGINE_HANG_TIMEOUT_S (0 turns the watch off).

A hung core is not declared dead: its requests keep waiting, and it counts as answering again as soon
as anything arrives from it (after SIGCONT, or once the long step ends). The server says so on /health
(503) and refuses new work meanwhile; restarting it is the orchestrator's call (its liveness probe).
"""

from __future__ import annotations

import asyncio
import logging
import math
import os
import time
from collections.abc import Callable

logger = logging.getLogger(__name__)

HANG_TIMEOUT_ENV = "MOPT_ENGINE_HANG_TIMEOUT_S"
DEFAULT_HANG_TIMEOUT_S = 120.0
"""Far above any one engine step of a GPU model, so only a core that stopped trips it."""
PING_PERIOD_S = 5.0
"""Longest silence before a ping (shorter for a short timeout: a quarter of it)."""


def hang_timeout_s() -> float:
    """Seconds a ping may wait for the core's answer, from MOPT_ENGINE_HANG_TIMEOUT_S (default
    DEFAULT_HANG_TIMEOUT_S; 0: no watch). A ValueError says what was wrong with a value that is set."""
    text = os.environ.get(HANG_TIMEOUT_ENV, "").strip()
    if not text:
        return DEFAULT_HANG_TIMEOUT_S
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not (math.isfinite(value) and value >= 0):
        raise ValueError(
            f"{HANG_TIMEOUT_ENV}={text!r}: give the seconds an engine core may leave a ping unanswered, a number"
            f" >= 0 (0 turns the check off; default {DEFAULT_HANG_TIMEOUT_S:g})"
        )
    return value


class HangWatch:
    """Pings the core through `ping` when it has been silent, on the frontend's event loop; the client
    calls `heard()` for everything the core sends."""

    def __init__(self, timeout_s: float, ping: Callable[[], None]) -> None:
        self.timeout_s = timeout_s
        """0: no pings, never hung."""
        self._ping = ping
        self._period = min(PING_PERIOD_S, timeout_s / 4)
        self._last_heard = time.monotonic()
        self._ping_sent = self._last_heard
        """When the latest ping left; it waits for an answer while later than `_last_heard`."""
        self._reported = False
        self._stopped = False

    def start(self, loop: asyncio.AbstractEventLoop) -> None:
        if self.timeout_s > 0:
            loop.call_later(self._period, self._tick, loop)

    def stop(self) -> None:
        """No more pings (the core is being stopped, or has failed): the next tick ends the watch."""
        self._stopped = True

    def heard(self) -> None:
        self._last_heard = time.monotonic()

    def hung_s(self) -> float:
        """How long the core has left a ping unanswered, once that is past the timeout; 0.0 otherwise."""
        if self._ping_sent <= self._last_heard:
            return 0.0
        waited = time.monotonic() - self._ping_sent
        return waited if 0 < self.timeout_s < waited else 0.0

    def _tick(self, loop: asyncio.AbstractEventLoop) -> None:
        if self._stopped:
            return
        now = time.monotonic()
        if self._ping_sent <= self._last_heard and now - self._last_heard >= self._period:
            self._ping_sent = now
            self._ping()
        self._report()
        loop.call_later(self._period, self._tick, loop)

    def _report(self) -> None:
        """Log the moment the core counts as hung, and the moment it answers again."""
        hung_s = self.hung_s()
        if hung_s and not self._reported:
            logger.error(
                "the engine core has not answered for %.0f s (%s=%g): /health answers 503 and new requests are"
                " refused until it does; running requests wait for it",
                hung_s,
                HANG_TIMEOUT_ENV,
                self.timeout_s,
            )
        elif self._reported and not hung_s:
            logger.warning("the engine core answers again: serving as before")
        self._reported = bool(hung_s)
