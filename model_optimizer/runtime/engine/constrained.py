"""The engine core's side of structured outputs: requests waiting for their grammar, and each step's masks.

A constrained request is held here until its grammar has compiled (in the compiler's threads), then
joins the scheduler's queue; a compile that fails finishes it with an error row. For a step whose
sampling rows include constrained requests, `fill` starts the masks of those rows as soon as the
previous step's tokens have advanced the matchers (`take`, before the scheduler appends them); the engine core (core.py) queues the step's
sampling with them (`wait`) only at its next step, after it has published the previous step's rows
and scheduled the next batch: the native mask fill (llguidance's thread pool, GIL released) runs on
other cores during that host work and during the step's forward on the device, so it costs the step
only the part of it that outlasts both. Pure Python; no torch here.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor
from concurrent.futures import wait as wait_futures
from dataclasses import dataclass
from typing import Any

from model_optimizer.runtime.engine.request import Request, RequestStatus
from model_optimizer.runtime.engine.scheduler import Scheduler
from model_optimizer.runtime.engine.scheduler_output import SchedulerOutput
from model_optimizer.runtime.structured.compiler import GrammarCompiler
from model_optimizer.runtime.structured.manager import (
    HostTokenMask,
    StructuredOutputManager,
    default_fill_threads,
    lanes_for,
    numpy_buffers,
)
from model_optimizer.runtime.structured.params import StructuredOutputs

COMPILE_WAIT_S = 0.01
"""Longest a step waits for a grammar to compile when nothing else can run (instead of spinning)."""


@dataclass
class Compiling:
    """A request waiting for its grammar: the compile, its constraint, and its completions."""

    future: Future
    constraint: StructuredOutputs
    children: list[Request]


class ConstrainedDecoding:
    def __init__(self, runner: Any, tokenizer: Any, vocab_size: int, eos_token_ids: frozenset[int]) -> None:
        """ValueError when the model or the runner cannot constrain sampling."""
        if tokenizer is None:
            raise ValueError("structured outputs need the model's tokenizer, and this model has none")
        if not hasattr(runner, "sample"):
            raise ValueError("this model runner cannot constrain sampling (structured outputs)")
        self.runner = runner
        threads = default_fill_threads()
        compiler = GrammarCompiler(tokenizer, vocab_size, eos_token_ids, lanes=lanes_for(threads))
        self.manager = StructuredOutputManager(compiler, threads)
        self.compiling: dict[str, Compiling] = {}
        """Request id -> its grammar's compile and its completions, which join the queue once it is done."""
        self._filler = ThreadPoolExecutor(1, "mopt-mask")
        self.wait_seconds = 0.0
        """Time the step loop waited for masks (the part of filling them that nothing hid)."""

    # ----------------------------------------------------------------- requests
    def submit(self, request_id: str, so: StructuredOutputs, children: list[Request]) -> None:
        self.compiling[request_id] = Compiling(self.manager.submit(so), so, children)

    def abort(self, parent: str, children: list[Request]) -> None:
        """Finish completions still waiting for their grammar (they are in no scheduler queue yet)."""
        if parent not in self.compiling:
            return
        for child in children:
            child.status = RequestStatus.FINISHED_ABORTED
        group = self.compiling[parent]
        if all(c.finished for c in group.children):
            del self.compiling[parent]
            if not any(other.future is group.future for other in self.compiling.values()):  # no one else waits
                self.manager.forget(group.constraint, group.future)

    def admit_compiled(self, scheduler: Scheduler, idle: bool) -> list[tuple[str, list[Request]]]:
        """Queue the completions whose grammar has compiled; returns (request id, completions) per group
        done waiting, those whose compile failed finished with status error. `idle`: nothing else can run,
        so wait a little for a compile rather than spin."""
        if idle and self.compiling:
            wait_futures([group.future for group in self.compiling.values()], COMPILE_WAIT_S, FIRST_COMPLETED)
        done = []
        for request_id, group in list(self.compiling.items()):
            future, children = group.future, group.children
            if not future.done():
                continue
            del self.compiling[request_id]
            error = future.exception()
            for child in children:
                if child.finished:  # aborted while compiling
                    continue
                if error is not None:
                    child.status, child.error = RequestStatus.FINISHED_ERROR, f"structured outputs: {error}"
                else:
                    self.manager.start(child.request_id, future.result())
                    scheduler.add_request(child)
            done.append((request_id, children))
        return done

    def drop(self, children: list[Request]) -> None:
        for child in children:
            self.manager.drop(child.request_id)

    # ----------------------------------------------------------------- steps
    def masked_rows(self, scheduler: Scheduler, out: SchedulerOutput) -> list[Request] | None:
        """The step's sampling rows in the runner's order when a grammar constrains any of them, else None.
        The scheduler's own list (no lookup per row); the check stops at the first constrained row."""
        manager = self.manager
        if not manager.num_matchers:
            return None
        rows = scheduler.sampling_requests(out)
        return rows if any(manager.has(r.request_id) for r in rows) else None

    def take(
        self, sampled: dict[str, tuple[Any, Any]], scheduler: Scheduler, out: SchedulerOutput
    ) -> list[tuple[Request, str | None]]:
        """Feed the tokens just collected for step `out` (the runner's, not yet appended) to the matchers, so
        that the next step's masks can start before the scheduler appends them; `end` what it returns
        afterwards. Only the requests that sampled in `out` take theirs: a new request under the id of one
        aborted while `out` ran must not take the aborted one's token."""
        return self.manager.take(sampled, scheduler.sampling_requests(out))

    @staticmethod
    def end(ended: list[tuple[Request, str | None]], scheduler: Scheduler) -> None:
        """End the requests whose grammar `take` finished ("stop") or failed; those that ended meanwhile
        (their tokens' own stops) keep their reason."""
        for request, error in ended:
            if error is None:
                # a grammar that ends on EOS (drawn under ignore_eos, which kept it from stopping the request
                # itself) ends on a token the text leaves out, as an EOS stop does
                last = request.output_token_ids[-1:]
                if not request.finished and last and last[0] in request.eos_token_ids:
                    request.stopped_on_token = True
                scheduler.finish(request, RequestStatus.FINISHED_STOPPED)
            else:
                scheduler.fail(request, error)

    def fill(self, rows: list[Request | None], background: bool) -> Future:
        """Start the masks of a step's sampling rows (in the runner's host buffers): a future of the
        HostTokenMask (None when no row needs one), filled in a thread when `background`."""
        buffers = getattr(self.runner, "token_mask_buffers", numpy_buffers)
        job = self.manager.prepare_fill(rows, buffers)
        if job is None:
            future: Future = Future()
            future.set_result(None)
            return future
        if background:
            return self._start(job)
        future = Future()
        future.set_result(job())
        return future

    def _start(self, job: Callable[[], HostTokenMask]) -> Future:
        """Run `job` in the filler thread, returning once it has begun. The thread needs the GIL to enter
        llguidance, and a thread that only waits for it gets it when the holder blocks or after the
        switch interval (5 ms): the step loop, which goes on in Python, waits here instead (tens of
        microseconds) so that the fill starts now, not after the loop's next blocking call."""
        begun = threading.Lock()  # a bare lock, released by the thread: no Event's condition and waiter list
        begun.acquire()

        def run() -> HostTokenMask:
            begun.release()
            return job()

        future = self._filler.submit(run)
        begun.acquire()  # blocks with the GIL released, until the thread has begun
        return future

    def wait(self, mask: Future) -> HostTokenMask | None:
        started = time.perf_counter()
        result = mask.result()
        self.wait_seconds += time.perf_counter() - started
        return result

    def stats(self) -> dict[str, float]:
        """EngineStats' grammar fields."""
        manager = self.manager
        return {
            "grammar_steps": manager.num_steps,
            "grammar_seconds": manager.seconds,
            "grammar_max_seconds": manager.max_seconds,
            "grammar_wait_seconds": self.wait_seconds,
        }

    def close(self) -> None:
        self._filler.shutdown(wait=False, cancel_futures=True)
        self.manager.close()
