"""The `encode` calls in flight on one Embedder: how a caller bounds or stops one, and their turns at the model.

A call runs its packed batches one turn at a time: it waits in line (first come, first served) for the
model, runs one batch, and goes to the back of the line. A small request that arrives while a large one
runs therefore waits for one of the large one's batches, not for all of them. Before each turn a call
looks at its `EmbedCall.cancelled` flag: a server sets it when the client hangs up or a drain runs out of
time, and the call stops with EmbedCancelled instead of running its next batch.

`Calls.open` counts a caller's call as in flight (the server's drain waits for these) until the block ends.
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field


class EmbedCancelled(Exception):
    """An encode call stopped before its end: its EmbedCall was cancelled (the client left, a drain timed out)."""


@dataclass(eq=False)
class EmbedCall:
    """One encode call's handle, which another thread may cancel."""

    max_num_tokens: int | None = None
    """Most tokens the call's inputs may hold in all (after truncation); more is a ValueError. None: no bound."""
    cancelled: threading.Event = field(default_factory=threading.Event)
    """Set (through Calls.cancel, which also wakes a call waiting for its turn) to stop the call before its
    next batch."""

    def check_num_tokens(self, num_tokens: int) -> None:
        """ValueError once the inputs counted so far hold more than `max_num_tokens`."""
        if self.max_num_tokens is not None and num_tokens > self.max_num_tokens:
            raise ValueError(
                f"the inputs hold more than {self.max_num_tokens:,} tokens in all (at least {num_tokens:,}), the "
                "most one request may embed; send them in several requests"
            )


class Calls:
    """The calls in flight on one Embedder and the line they wait in for the model. Thread-safe."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._line: deque[object] = deque()
        """Tickets of the turns asked for, in order; the first holds the model."""
        self._open: set[EmbedCall] = set()

    @property
    def num_in_flight(self) -> int:
        """Calls opened with `open` and not yet closed."""
        return len(self._open)

    @property
    def num_waiting(self) -> int:
        """Turns asked for and not yet given: calls waiting for the model while another runs a batch."""
        return max(len(self._line) - 1, 0)

    @contextmanager
    def open(self, max_num_tokens: int | None = None) -> Iterator[EmbedCall]:
        """A new call, counted in flight until the block ends (the server: until its response is ready)."""
        call = EmbedCall(max_num_tokens)
        self._open.add(call)
        try:
            yield call
        finally:
            self._open.discard(call)

    def cancel(self, call: EmbedCall) -> None:
        """Stop `call` before its next batch; a call waiting for its turn leaves the line at once."""
        call.cancelled.set()
        with self._cond:
            self._cond.notify_all()

    def cancel_all(self) -> None:
        """Cancel every call opened with `open` (a drain that ran out of time)."""
        for call in list(self._open):
            self.cancel(call)

    @contextmanager
    def turn(self, call: EmbedCall) -> Iterator[None]:
        """Hold the model for one batch, after the turns asked for before; EmbedCancelled instead once `call`
        is cancelled."""
        ticket = object()  # not the call: a turn is one batch's
        with self._cond:
            self._line.append(ticket)
            try:
                while True:
                    if call.cancelled.is_set():
                        raise EmbedCancelled("the embedding call was cancelled")
                    if self._line[0] is ticket:
                        break
                    self._cond.wait()
            except BaseException:
                self._line.remove(ticket)
                self._cond.notify_all()  # it may have been first: the next one's turn
                raise
        try:
            yield
        finally:
            with self._cond:
                self._line.popleft()
                self._cond.notify_all()
