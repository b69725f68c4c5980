"""A gate on an Embedder's batches, so a test can ask something while a call is provably mid-way."""

from __future__ import annotations

import threading

WAIT = 60.0  # seconds; only a bound on a hang


class BatchGate:
    """Holds each batch an Embedder runs until the test lets it through, and records the batches in the
    order they ran (their token ids)."""

    def __init__(self, embedder, monkeypatch) -> None:
        self.cond = threading.Condition()
        self.num_entered = 0
        self.num_allowed = 0
        self.open = False
        self.ran: list[list[list[int]]] = []
        run_batch = embedder._run_batch

        def gated(batch, *args, **kwargs):
            with self.cond:
                self.num_entered += 1
                self.cond.notify_all()
                if not self.cond.wait_for(lambda: self.open or self.num_allowed > 0, WAIT):
                    raise TimeoutError("the test never let the batch through")
                if not self.open:
                    self.num_allowed -= 1
                self.ran.append(batch.token_ids)
            return run_batch(batch, *args, **kwargs)

        monkeypatch.setattr(embedder, "_run_batch", gated)

    def wait_entered(self, n: int) -> None:
        with self.cond:
            assert self.cond.wait_for(lambda: self.num_entered >= n, WAIT), f"batch {n} never reached the model"

    def allow(self, n: int = 1) -> None:
        with self.cond:
            self.num_allowed += n
            self.cond.notify_all()

    def release_all(self) -> None:
        with self.cond:
            self.open = True
            self.cond.notify_all()
