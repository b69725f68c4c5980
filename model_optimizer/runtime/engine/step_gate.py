"""StepGate: hold the engine loop between steps, and the test hooks read once at start.

The AsyncEngine (async_engine.py) owns one gate and asks it before every step.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass

FAULT_ENV = "MOPT_FAULT_AFTER_STEPS"
HOLD_ENV = "MOPT_HOLD_AFTER_STEPS"


@dataclass(frozen=True)
class TestHooks:
    """Switches for tests that drive `mopt serve` as a process, read once when the engine starts.

    MOPT_FAULT_AFTER_STEPS=N makes the loop raise after N engine steps (the server must exit
    non-zero); MOPT_HOLD_AFTER_STEPS=N starts the gate held with N steps allowed, so the engine
    provably stops mid-request (a drain that must time out). Unset, they cost one `is None` per step.
    """

    __test__ = False  # not a pytest test class, despite the name

    fault_after_steps: int | None = None
    hold_after_steps: int | None = None

    @classmethod
    def from_env(cls) -> TestHooks:
        fault, hold = os.environ.get(FAULT_ENV), os.environ.get(HOLD_ENV)
        return cls(int(fault) if fault else None, int(hold) if hold else None)


class StepGate:
    """A gate in front of every engine step: hold it and the loop runs no step until it is released.

    Why it exists: a test of disconnects, aborts or drains needs an engine that is provably in
    the middle of a request. Betting on the model being slow does not give that (a fast machine
    finishes the request first, a slow one times out), so the test holds the gate instead and
    lets steps through one by one. The same switch is meant for pausing generation later (say,
    while weights are swapped) without dropping requests.

    While held, the loop still applies what arrives in its inbox: new requests are queued, aborts
    free their blocks, `abort_all` and `stop` work as always, so a held gate never blocks shutdown
    or a drain. A step already past the gate when `hold()` is called finishes.

    Every method is thread-safe. `wait_parked`, `step` and `run_until` block the calling thread:
    call them from a test thread or an executor, never from the event loop the engine delivers
    to. Open (the default), the gate costs the loop one attribute read per step and, each time
    round, a notify that nobody waits for.
    """

    def __init__(self, lock: threading.Lock, loop_wakeup: threading.Condition) -> None:
        self._lock = lock
        self._loop_wakeup = loop_wakeup
        """The condition the engine loop waits on (it shares `lock`)."""
        self._changed = threading.Condition(lock)
        """Observers (wait_parked) wait on this; the loop notifies it every time round."""
        self._held = False
        self._credit = 0
        """Steps that may still pass while held."""
        self._parked = False
        """The loop is waiting with nothing it may do (no command, no step allowed or no work)."""
        self._ended = False
        self._num_steps = 0

    # ----------------------------------------------------------------- controls
    @property
    def is_held(self) -> bool:
        return self._held

    @property
    def num_steps(self) -> int:
        """Steps the loop has run (all of them, held or not), as of its last time round."""
        return self._num_steps

    def hold(self) -> None:
        """Stop the loop before its next step; steps granted earlier by `allow` are withdrawn.

        Returns at once: a step already past the gate finishes; `wait_parked()` says when none runs.
        """
        with self._lock:
            self._held, self._credit = True, 0

    def release(self) -> None:
        """Let the loop step freely again."""
        with self._lock:
            self._held, self._credit = False, 0
            self._wake_loop()

    @contextmanager
    def held(self) -> Iterator[StepGate]:
        """`with gate.held():` holds the gate for the block and releases it however the block ends."""
        self.hold()
        try:
            yield self
        finally:
            self.release()

    def allow(self, num_steps: int = 1) -> None:
        """Let `num_steps` more steps through a held gate (they run once there is work)."""
        if isinstance(num_steps, bool) or not isinstance(num_steps, int) or num_steps < 1:
            raise ValueError(f"num_steps must be a positive integer, got {num_steps!r}")
        with self._lock:
            if not self._held:
                raise ValueError("allow() applies to a held gate; call hold() first")
            self._credit += num_steps
            self._wake_loop()

    def wait_parked(self, timeout: float | None = None) -> bool:
        """Block until the loop waits with nothing it may do: every command sent before this call is
        applied (requests added, aborts done, their blocks freed) and no step runs. With the gate
        open that means idle. False on timeout or when the loop has ended."""
        with self._lock:
            return self._changed.wait_for(lambda: self._parked or self._ended, timeout) and not self._ended

    def step(self, num_steps: int = 1, timeout: float | None = None) -> int:
        """On a held gate, run up to `num_steps` steps and wait until the loop parks again; returns how
        many ran (fewer when the engine ran out of work; the rest of the grant is withdrawn)."""
        before = self._num_steps
        self.allow(num_steps)
        self.wait_parked(timeout)
        with self._lock:
            self._credit = 0
            return self._num_steps - before

    def run_until(self, condition: Callable[[], bool], timeout: float | None = None) -> bool:
        """On a held gate, run one step at a time until `condition()` holds (checked while parked).

        False when the engine runs out of work (or the loop ends) first, or `timeout` passes.
        """
        deadline = None if timeout is None else time.monotonic() + timeout
        while not condition():
            remaining = None if deadline is None else deadline - time.monotonic()
            if (remaining is not None and remaining <= 0) or self.step(1, remaining) == 0:
                return condition()
        return True

    # ----------------------------------------------------------------- loop side (lock held unless said)
    def _wake_loop(self) -> None:
        """Something changed for the loop (a command, a grant, stop): it is no longer parked."""
        self._parked = False
        self._loop_wakeup.notify()

    def _may_step(self) -> bool:
        return not self._held or self._credit > 0

    def _round(self, num_steps: int, parking: bool) -> None:
        """The loop's report each time round: steps run so far, and whether it is about to wait."""
        self._num_steps = num_steps
        self._parked = parking
        self._changed.notify_all()

    def _pass(self) -> bool:
        """Called by the loop (lock not held) before a step: may it run one now?"""
        if not self._held:
            return True  # open: no lock on the hot path
        with self._lock:
            if not self._held:
                return True
            if self._credit:
                self._credit -= 1
                return True
            return False

    def _end(self) -> None:
        with self._lock:
            self._ended = True
            self._changed.notify_all()
