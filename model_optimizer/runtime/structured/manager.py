"""StructuredOutputManager: the engine core's grammar state of each constrained request, and its masks.

Each constrained completion has an llguidance matcher that has consumed exactly its output tokens
(`advance`, after every collect). Before a step samples, `fill` writes, for the step's constrained
rows only, a bitmask of the tokens each one may take next (bit t of a row set: token t allowed)
into host memory the runner gives (pinned, on CUDA), with llguidance's thread pool (the GIL is
released): the device runs the step's forward meanwhile (engine/core.py), and the runner applies
the mask inside sampling. A preempted request keeps its matcher: its output tokens stay, and so
does what the matcher has consumed.

A matcher that has stopped (nothing but EOS may follow) ends its request at once with finish reason
"stop"; one that could not take a sampled token (an error in the grammar engine: the mask allows
only tokens it accepts) fails its request alone.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass
from typing import Any

import numpy as np

from model_optimizer.runtime.structured.compiler import Compiled, GrammarCompiler
from model_optimizer.runtime.structured.params import StructuredOutputs

PARALLEL_ADVANCE_ROWS = 8
"""From this many rows, matchers take their tokens on llguidance's thread pool rather than in turn."""


@dataclass
class HostTokenMask:
    """One step's grammar masks on the host, by sampling row (the runner's order of the step's samples)."""

    mask_index: np.ndarray
    """(num_rows,) int32: the row of `bitmask` that constrains each sampling row; -1 for none."""
    bitmask: np.ndarray
    """(num_masked, words) int32: bit t (word t // 32, bit t % 32) set when token t is allowed."""


MaskBuffers = Callable[[int, int, int], HostTokenMask]
"""(num_rows, num_masked, words) -> empty HostTokenMask arrays to fill (the runner's pinned memory)."""


def numpy_buffers(num_rows: int, num_masked: int, words: int) -> HostTokenMask:
    return HostTokenMask(np.empty(num_rows, dtype=np.int32), np.empty((num_masked, words), dtype=np.int32))


class _Matcher:
    __slots__ = ("matcher", "num_consumed")

    def __init__(self, matcher: Any) -> None:
        self.matcher = matcher
        self.num_consumed = 0


class StructuredOutputManager:
    def __init__(self, compiler: GrammarCompiler) -> None:
        self.compiler = compiler
        self._matchers: dict[str, _Matcher] = {}
        self._executor: Any = None
        self.num_steps = 0
        """Steps that sampled with grammar masks."""
        self.seconds = 0.0
        """Host time spent advancing matchers and filling masks, all steps together."""
        self.max_seconds = 0.0
        """The longest one step spent on them."""
        self._advance_seconds = 0.0
        """Time advancing matchers since the last fill (counted with the next step's masks)."""

    def submit(self, so: StructuredOutputs) -> Future[Compiled]:
        return self.compiler.submit(so)

    def start(self, request_id: str, compiled: Compiled) -> None:
        """Give a completion its own matcher (its constraint is compiled)."""
        self._matchers[request_id] = _Matcher(compiled.matcher())

    def has(self, request_id: str) -> bool:
        return request_id in self._matchers

    @property
    def num_matchers(self) -> int:
        return len(self._matchers)

    def drop(self, request_id: str) -> None:
        self._matchers.pop(request_id, None)

    def advance(self, requests: list[Any]) -> list[tuple[Any, str | None]]:
        """Feed each constrained request's new output tokens to its matcher. Returns the requests the
        grammar ends: (request, None) when it has stopped, (request, error) when it failed."""
        started = time.perf_counter()
        batch: list[tuple[_Matcher, Any]] = []
        ended: list[tuple[Any, str | None]] = []
        for request in requests:
            state = self._matchers.get(request.request_id)
            if state is None or request.finished:
                continue
            tokens = request.output_token_ids[state.num_consumed :]
            if len(tokens) == 1:
                batch.append((state, request))
            elif tokens:  # more than one at once: only a runner that returns several per step does that
                state.matcher.consume_tokens(tokens)
                state.num_consumed += len(tokens)
                self._check(state, request, ended)
        if len(batch) >= PARALLEL_ADVANCE_ROWS:
            self.executor().consume_token_par([(s.matcher, r.output_token_ids[-1]) for s, r in batch])
        else:
            for state, request in batch:
                state.matcher.consume_token(request.output_token_ids[-1])
        for state, request in batch:
            state.num_consumed += 1
            self._check(state, request, ended)
        self._advance_seconds += time.perf_counter() - started
        return ended

    @staticmethod
    def _check(state: _Matcher, request: Any, ended: list[tuple[Any, str | None]]) -> None:
        matcher = state.matcher
        if matcher.is_error():
            ended.append((request, f"the output left its grammar: {matcher.get_error()}"))
        elif matcher.is_stopped():
            ended.append((request, None))

    def fill(self, requests: list[Any], buffers: MaskBuffers = numpy_buffers) -> HostTokenMask | None:
        """The masks of one step's sampling rows (`requests` in row order; None or a finished request
        for a row that needs none), or None when no row has a live matcher."""
        job = self.prepare_fill(requests, buffers)
        return job() if job is not None else None

    def prepare_fill(
        self, requests: list[Any], buffers: MaskBuffers = numpy_buffers
    ) -> Callable[[], HostTokenMask] | None:
        """`fill` in two: the rows and buffers now (the caller's thread), and a job that computes the masks
        (llguidance's pool, the GIL released), to run in a thread while the caller goes on; None when no
        row has a live matcher. No matcher of these rows may advance until the job has run."""
        started = time.perf_counter()
        rows: list[tuple[int, Any]] = []
        for i, request in enumerate(requests):
            state = self._matchers.get(request.request_id) if request is not None and not request.finished else None
            if state is not None and not state.matcher.is_stopped():
                rows.append((i, state.matcher))
        if not rows:
            return None
        words = (self.compiler.tokenizer().vocab_size + 31) // 32
        mask = buffers(len(requests), len(rows), words)
        mask.mask_index.fill(-1)
        for k, (i, _) in enumerate(rows):
            mask.mask_index[i] = k
        bitmask = mask.bitmask
        if not bitmask.flags["C_CONTIGUOUS"] or bitmask.dtype != np.int32 or bitmask.shape != (len(rows), words):
            raise ValueError(f"mask buffer must be C-contiguous int32 of shape {(len(rows), words)}")
        pairs = [(matcher, k) for k, (_, matcher) in enumerate(rows)]
        executor = self.executor()  # made here, never by two threads at once
        spent = self._advance_seconds + time.perf_counter() - started
        self._advance_seconds = 0.0

        def compute() -> HostTokenMask:
            begun = time.perf_counter()
            executor.unsafe_compute_mask_ptr(pairs, bitmask.ctypes.data, words * 4, len(pairs))
            step = spent + time.perf_counter() - begun
            self.num_steps += 1
            self.seconds += step
            self.max_seconds = max(self.max_seconds, step)
            return mask

        return compute

    def executor(self) -> Any:
        if self._executor is None:
            import llguidance as llg

            self._executor = llg.LLExecutor()
        return self._executor

    def close(self) -> None:
        self.compiler.close()
