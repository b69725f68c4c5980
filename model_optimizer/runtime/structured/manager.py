"""StructuredOutputManager: the engine core's grammar state of each constrained request, and its masks.

Each constrained completion has an llguidance matcher that has consumed exactly its output tokens
(`advance`, after every collect). Before a step samples, `fill` writes, for the step's constrained
rows only, a bitmask of the tokens each one may take next (bit t of a row set: token t allowed)
into host memory the runner gives (pinned, on CUDA), with llguidance's thread pool (the GIL is
released; a matcher that has taken no token yet gets its constraint's first mask copied, computed
when it compiled, so a heavy grammar's first mask never stalls the batch): the device runs the step's forward meanwhile (engine/core.py), and the runner applies
the mask inside sampling. Each request's matcher belongs to one of the compiler's lanes (the least
busy when it starts): matchers of one lane share a lexer and its lock, so only rows of different
lanes fill (and advance) in parallel; the rows go to the pool grouped by lane, so that its threads
take whole lanes rather than wait on each other's locks. A constraint builds its lanes while its
requests run (Compiled): the matchers that started before a lane was built move onto it, the tokens
they took replayed into a fresh copy of it (0.1 ms for 150 tokens of a 151k-token vocabulary),
before the next step's masks (MOVE_TOKENS_PER_FILL replayed tokens a step at most), so a burst of
requests does not fill in one lane's turn for its whole length. A preempted request keeps its
matcher: its output tokens stay, and so does what the matcher has consumed.

A matcher that has stopped (nothing but EOS may follow) ends its request at once with finish reason
"stop"; one that could not take a sampled token (an error in the grammar engine: the mask allows
only tokens it accepts) fails its request alone.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterable, Mapping
from concurrent.futures import Future
from dataclasses import dataclass
from typing import Any

import numpy as np

from model_optimizer.runtime.structured.compiler import Compiled, GrammarCompiler
from model_optimizer.runtime.structured.grammar import output_error
from model_optimizer.runtime.structured.params import StructuredOutputs

PARALLEL_ADVANCE_ROWS = 128
"""From this many rows, matchers take their tokens on llguidance's thread pool rather than in turn on the
loop thread. At 64 rows in turn measured the faster on the H200's host (waking the pool's threads costs
more than the tokens; the figures: README "Structured outputs").
Larger batches were not measured, and from 128 rows keep the pool."""
MAX_FILL_THREADS = 12
"""Most threads that fill masks: offline, 64 rows of a 151k vocabulary filled as fast with 12 threads as
with 14 (and faster than with 8), and served at 64 requests on the H200's 16 cores 12 gave a far lower
TPOT than 8 (the figures: README "Structured outputs")."""
RESERVED_CORES = 4
"""Cores left to the rest of the host's work: the step loop, the frontend, the output thread, the OS."""


FILL_THREADS_ENV = "MOPT_GRAMMAR_THREADS"
"""Environment variable that sets the fill threads (1 to the cores), for measuring what more of them buy."""


def default_fill_threads() -> int:
    """The cores this process may run on less RESERVED_CORES, 1 to MAX_FILL_THREADS (16 cores: 12);
    MOPT_GRAMMAR_THREADS, when set, instead. ValueError for a value that is not 1 to the cores."""
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    wanted = os.environ.get(FILL_THREADS_ENV, "").strip()
    if wanted:
        if not wanted.isdigit() or not 1 <= int(wanted) <= cores:
            raise ValueError(f"{FILL_THREADS_ENV} must be a whole number from 1 to {cores} (the cores), got {wanted!r}")
        return int(wanted)
    return max(1, min(MAX_FILL_THREADS, cores - RESERVED_CORES))


MOVE_TOKENS_PER_FILL = 1024
"""The most tokens a fill replays to move matchers onto new lanes (~1 ms on the loop thread: a replay took
0.07 ms for 50 tokens and 0.16 ms for 150 of a 151k-token vocabulary); the rest move at the next fills.
256 live rows of 150 tokens meeting their second lane would otherwise stall one step ~13 ms."""

LANES_PER_THREAD = 4
"""Lanes per fill thread (see lanes_for)."""


def lanes_for(threads: int, per_thread: int = LANES_PER_THREAD) -> int:
    """Lanes for a pool of `threads`. A lane's rows fill one after another, so the busiest lane bounds a
    step: smaller lanes balance better (a string's inside costs ten times a number's), and the pool,
    which splits a step's rows (grouped by lane) in halves and lets an idle thread steal a piece,
    finds more pieces whose lock no one holds. More lanes cost more warming up: each lexer's
    automaton is shared by fewer requests."""
    return 1 if threads <= 1 else per_thread * threads


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
    __slots__ = ("compiled", "consumed", "ended", "lane", "matcher")

    def __init__(self, compiled: Compiled, matcher: Any, lane: int) -> None:
        self.compiled = compiled
        """What the matcher was copied from, told when it is done (Compiled.release)."""
        self.matcher = matcher
        self.lane = lane
        self.consumed: list[int] = []
        """The tokens the matcher has taken: replayed when it moves to another lane."""
        self.ended = matcher.is_stopped()
        """Stopped or failed, as of its last token (_check): its rows need no mask."""


_Row = tuple[int, int, _Matcher, Any, int]
"""A request taking one token: (its matcher's lane, its position in the batch, matcher, request, token)."""
_NO_TOKEN = (None, None)
"""What `take` reads for a request the runner returned nothing for."""


def _first(item: tuple) -> Any:
    return item[0]


class StructuredOutputManager:
    def __init__(self, compiler: GrammarCompiler, threads: int | None = None) -> None:
        """`threads`: llguidance's pool size for masks and tokens (default: default_fill_threads())."""
        if threads is not None and threads < 1:
            raise ValueError(f"threads must be at least 1, got {threads}")
        self.compiler = compiler
        self.threads = threads or default_fill_threads()
        self._matchers: dict[str, _Matcher] = {}
        self._lane_load = [0] * compiler.lanes
        """Live matchers per lane."""
        self._spreading: dict[Compiled, int] = {}
        """Constraints whose matchers started while they had fewer lanes than matchers, and the lanes they had
        when their matchers were last spread."""
        self._executor: Any = None
        self.num_steps = 0
        """Steps that sampled with grammar masks."""
        self.seconds = 0.0
        """Host time spent advancing matchers and filling masks, all steps together."""
        self.max_seconds = 0.0
        """The longest one step spent on them."""
        self.fill_seconds = 0.0
        """Of `seconds`, the masks' computing alone (in the filler thread), all steps together."""
        self._words = 0
        """Bitmask words per row (the vocabulary over 32), once known."""
        self._advance_seconds = 0.0
        """Time advancing matchers since the last fill (counted with the next step's masks)."""
        self.num_first_masks = 0
        """Rows whose mask was their constraint's first mask, copied (computed when it compiled), all steps."""

    def submit(self, so: StructuredOutputs) -> Future[Compiled]:
        return self.compiler.submit(so)

    def forget(self, so: StructuredOutputs, future: Future[Compiled]) -> None:
        """No request waits for this compile any more (GrammarCompiler.forget)."""
        self.compiler.forget(so, future)

    def start(self, request_id: str, compiled: Compiled) -> None:
        """Give a completion its own matcher (its constraint is compiled), in the least busy lane."""
        lanes = min(len(self._lane_load), compiled.lanes)
        lane = min(range(lanes), key=self._lane_load.__getitem__)
        self._lane_load[lane] += 1
        self._matchers[request_id] = _Matcher(compiled, compiled.matcher(lane, self.compiler.pool), lane)
        if compiled.short_of_lanes:
            self._spreading.setdefault(compiled, lanes)

    def _spread(self) -> None:
        """Move matchers onto the lanes built since they started (see the module's docstring), at most
        MOVE_TOKENS_PER_FILL replayed tokens a fill; a constraint leaves `_spreading` once its matchers are
        even over every lane its live matchers want, or it has none live."""
        budget = [MOVE_TOKENS_PER_FILL]
        for compiled, seen in list(self._spreading.items()):
            lanes = compiled.lanes  # the pool may build more meanwhile: a later fill spreads onto them
            if lanes > seen:
                if not self._even_out(compiled, lanes, budget):
                    continue  # the rest at the next fill
                self._spreading[compiled] = lanes
            if not compiled.short_of_lanes and compiled.lanes == lanes:
                del self._spreading[compiled]

    def _even_out(self, compiled: Compiled, lanes: int, budget: list[int]) -> bool:
        """At most ceil(matchers / lanes) live matchers of `compiled` in each of its first `lanes` lanes; the
        ones with the fewest tokens move first (the shortest replays), while `budget[0]` (tokens to replay,
        spent here) lasts. Whether they are even now."""
        mine = [state for state in self._matchers.values() if state.compiled is compiled and not state.ended]
        count = [0] * lanes
        for state in mine:
            count[state.lane] += 1
        cap = -(-len(mine) // lanes)
        for state in sorted(mine, key=lambda state: len(state.consumed)):
            if count[state.lane] <= cap:
                continue
            if budget[0] <= 0:
                return False
            budget[0] -= len(state.consumed) + 1
            target = min(range(lanes), key=count.__getitem__)
            moved = compiled.copy(target)
            if not moved.consume_tokens(state.consumed) or moved.is_error():  # never seen: it stays where it is
                continue
            count[state.lane] -= 1
            count[target] += 1
            self._lane_load[state.lane] -= 1
            self._lane_load[target] += 1
            state.matcher, state.lane = moved, target
        return True

    def lane_of(self, request_id: str) -> int:
        """The lane of a request's matcher (KeyError without one)."""
        return self._matchers[request_id].lane

    def has(self, request_id: str) -> bool:
        return request_id in self._matchers

    @property
    def num_matchers(self) -> int:
        return len(self._matchers)

    def drop(self, request_id: str) -> None:
        state = self._matchers.pop(request_id, None)
        if state is not None:
            self._lane_load[state.lane] -= 1
            state.compiled.release()
            if not state.compiled.live:
                self._spreading.pop(state.compiled, None)

    def advance(self, requests: list[Any]) -> list[tuple[Any, str | None]]:
        """Feed each constrained request's new output tokens to its matcher. Returns the requests the
        grammar ends: (request, None) when it has stopped, (request, error) when it failed."""
        started = time.perf_counter()
        matchers = self._matchers
        batch: list[_Row] = []
        ended: list[tuple[Any, str | None]] = []
        for request in requests:
            state = matchers.get(request.request_id)
            if state is None or request.finished:
                continue
            tokens = request.output_token_ids
            new = len(tokens) - len(state.consumed)  # counted, not sliced: a slice copies the whole tail each step
            if new == 1:
                batch.append((state.lane, len(batch), state, request, tokens[-1]))
            elif new > 0:  # more than one at once: only a runner that returns several per step does that
                self._catch_up(state, tokens)
                done, error = self._check(state, state.matcher.is_error())
                if done:
                    ended.append((request, error))
        self._consume(batch, ended)
        self._advance_seconds += time.perf_counter() - started
        return ended

    def take(self, sampled: Mapping[str, tuple[Any, Any]], requests: Iterable[Any]) -> list[tuple[Any, str | None]]:
        """`advance` with a step's sampled ids (the runner's `collect`, request id -> (token, logprob)) before
        the scheduler appends them to the requests (`requests`: the objects that sampled in the step, in
        row order), so that the next step's masks can start filling at once, while it does. A request the
        scheduler will not give its token (finished meanwhile; no id: its logits were not finite, it fails)
        takes nothing. Returns what `advance` returns; the caller ends those requests once the scheduler
        has appended."""
        started = time.perf_counter()
        matchers = self._matchers
        batch: list[_Row] = []
        ended: list[tuple[Any, str | None]] = []
        for request in requests:
            state = matchers.get(request.request_id)
            if state is None or request.finished:
                continue
            token = sampled.get(request.request_id, _NO_TOKEN)[0]
            if type(token) is not int or token < 0:
                continue
            tokens = request.output_token_ids
            if len(tokens) > len(state.consumed):  # tokens that came another way (never in the engine's steps)
                self._catch_up(state, tokens)
            batch.append((state.lane, len(batch), state, request, token))
        self._consume(batch, ended)
        self._advance_seconds += time.perf_counter() - started
        return ended

    @staticmethod
    def _catch_up(state: _Matcher, tokens: list[int]) -> None:
        """Feed the matcher the request's output tokens it has not taken."""
        new = tokens[len(state.consumed) :]
        state.matcher.consume_tokens(new)
        state.consumed.extend(new)

    def _consume(self, batch: list[_Row], ended: list[tuple[Any, str | None]]) -> None:
        """One token per matcher: in turn, or from PARALLEL_ADVANCE_ROWS rows on, on the pool (GIL released).
        A matcher's consume says whether it failed: only the others are asked whether they stopped (one
        call into llguidance per row, not two). What ends is reported in the rows' order."""
        if len(batch) >= PARALLEL_ADVANCE_ROWS:
            batch.sort()  # whole lanes per pool thread: (lane, position) tuples, no key function per row
            oks = self.executor().consume_token_par([(row[2].matcher, row[4]) for row in batch])
        else:
            oks = [row[2].matcher.consume_token(row[4]) for row in batch]
        finished: list[tuple[int, Any, str | None]] = []
        for (_, position, state, request, token), ok in zip(batch, oks):
            state.consumed.append(token)
            done, error = self._check(state, not ok)
            if done:
                finished.append((position, request, error))
        finished.sort(key=_first)
        ended.extend((request, error) for _, request, error in finished)

    @staticmethod
    def _check(state: _Matcher, failed: bool) -> tuple[bool, str | None]:
        """(ended, error) of a matcher after its tokens: `failed` (it could not take one) ends it with the
        grammar's error, else it ends when it has stopped (error None)."""
        if failed:
            state.ended = True
            return True, output_error(state.matcher)
        if state.matcher.is_stopped():
            state.ended = True
            return True, None
        return False, None

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
        if self._spreading:
            self._spread()
        matchers = self._matchers
        mask_rows: list[int] = []  # the sampling rows that take a mask, in order
        rows: list[tuple[int, int, int, Any]] = []  # (lane, bitmask row, sampling row, matcher)
        first: list[tuple[int, np.ndarray]] = []  # (bitmask row, mask) of the matchers that took no token yet
        for i, request in enumerate(requests):
            if request is None or request.finished:
                continue
            state = matchers.get(request.request_id)
            if state is not None and not state.ended:
                if not state.consumed and state.compiled.first_mask is not None:
                    first.append((len(rows) + len(first), state.compiled.first_mask))
                else:
                    rows.append((state.lane, len(rows) + len(first), i, state.matcher))
                mask_rows.append(i)
        if not mask_rows:
            return None
        words = self._words or self._count_words()
        num_masked = len(mask_rows)
        mask = buffers(len(requests), num_masked, words)
        bitmask = mask.bitmask
        if not bitmask.flags.c_contiguous or bitmask.dtype != np.int32 or bitmask.shape != (num_masked, words):
            raise ValueError(f"mask buffer must be C-contiguous int32 of shape {(num_masked, words)}")
        mask.mask_index.fill(-1)
        mask.mask_index[mask_rows] = np.arange(num_masked, dtype=np.int32)  # one numpy op, not a loop
        self.num_first_masks += len(first)
        rows.sort()  # whole lanes per pool thread: plain tuples (lane, then position), no key function per row
        pairs = [(row[3], row[1]) for row in rows]
        pointer = bitmask.ctypes.data  # read here: the filler thread enters llguidance at once
        executor = self.executor()  # made here, never by two threads at once
        spent = self._advance_seconds + time.perf_counter() - started
        self._advance_seconds = 0.0

        def compute() -> HostTokenMask:
            begun = time.perf_counter()
            for row, first_mask in first:  # computed when the constraint compiled (Compiled.first_mask);
                bitmask[row] = first_mask[:words]  # llguidance's own has a word more when 32 divides the vocabulary
            if pairs:
                executor.unsafe_compute_mask_ptr(pairs, pointer, words * 4, num_masked)
            computed = time.perf_counter() - begun
            self.fill_seconds += computed
            step = spent + computed
            self.num_steps += 1
            self.seconds += step
            self.max_seconds = max(self.max_seconds, step)
            return mask

        return compute

    def _count_words(self) -> int:
        self._words = (self.compiler.tokenizer().vocab_size + 31) // 32
        return self._words

    def executor(self) -> Any:
        if self._executor is None:
            import llguidance as llg

            self._executor = llg.LLExecutor(self.threads)
        return self._executor

    def close(self) -> None:
        self.compiler.close()
