"""GrammarCompiler: StructuredOutputs -> a ready llguidance matcher, compiled in threads, cached per constraint.

Compiling never runs inside an engine step: `submit` returns a future at once, a pool thread builds
the llguidance tokenizer (once, on the first constraint: 0.1 s at an 8k vocabulary, seconds at 150k)
and then the constraint's grammar, a first matcher and its first mask; every request with the same
constraint gets a copy of that matcher (microseconds) instead of compiling again, and its first step
copies that mask (Compiled.first_mask) instead of computing it: a heavy grammar's first mask (a
4,000-property schema with patterns: 2-4 s) would stall the whole batch inside the step, while here
only its own requests wait for it. llguidance drops the GIL while it compiles, so the step loop runs
on meanwhile.

A copy shares its template's lexer (its lazily built automaton) behind one lock, which every mask
and every token of every copy takes for its whole length: masks of copies of one template never
run in parallel, however many threads fill them. So a constraint in use by several requests gets
`lanes` templates, each with a lexer of its own (a compile each, milliseconds, in the background),
and the manager spreads requests over them: rows of different lanes fill in parallel, rows of one
lane share a warm automaton. Its parser limits (lexer fuel, Earley items, grammar
size) turn a pathological grammar into an error, never an endless compile.
"""

from __future__ import annotations

import functools
import os
import threading
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

import numpy as np

from model_optimizer.common.lru import LruCache
from model_optimizer.runtime.structured.grammar import SLICES, GrammarError, engine_error, ll_tokenizer, matcher
from model_optimizer.runtime.structured.params import StructuredOutputs, spec_chars

CACHE_SIZE = 512
"""Compiled constraints kept (least recently used dropped first)."""
CACHE_CHARS = 8 << 20
"""The most characters of constraint text the cached ones may add up to: a compile's memory follows its
text (a 50k-value enum, 820 KB of text, took 28 MB), so 512 of those would take 14 GB."""
LANE_TRIM_CHARS = 1 << 16
"""Constraints of more characters than this keep one lane while no request uses them (their lexers weigh
megabytes each); smaller ones keep their lanes, warm, for the next burst (a lane of a small schema is
tens of kilobytes, and a cold one costs its first steps: +27% over 200 steps while 32 lexers warmed up)."""


class Compiled:
    """A compiled constraint: pristine matchers (one per lane, each with a lexer of its own) that each
    request's matcher is copied from.

    It starts with one lane and grows one lane for each live matcher beyond the lanes built, up to its
    lanes: a constraint used once costs one compile, one used by 64 requests at once has its 48 lanes (at
    12 fill threads). The pool builds them one task each, in the background, each usable as soon as it is
    built, so no request waits for lanes (the manager moves the matchers that started meanwhile onto the
    new ones), and a new constraint's first compile, queued meanwhile, waits for one lane, not for dozens.
    A large constraint (`trim_when_idle`) keeps its first lane alone once its last matcher is released:
    the others' lexers (megabytes each) do not stay in the compiler's cache."""

    def __init__(
        self,
        template: Any,
        make: Callable[[], Any] | None = None,
        lanes: int = 1,
        trim_when_idle: bool = False,
        first_mask: np.ndarray | None = None,
    ) -> None:
        """`make`: a new template of the constraint (a compile, run in the pool); `lanes`: the most to have;
        `first_mask`: the mask of a matcher that has taken no token (see the attribute)."""
        self.trim_when_idle = trim_when_idle
        self.first_mask = first_mask
        """(words,) int32, read-only: the mask of every matcher of the constraint that has taken no token (the
        same in every lane), computed in the compile's thread; None: not computed (the step computes it)."""
        self._templates = [template]
        self._make = make
        self._want = lanes if make is not None else 1
        self._live = 0
        """Matchers taken and not released."""
        self._growing: Future | None = None
        """The build of the next lane, queued or running; None when none is."""
        self._lock = threading.Lock()
        """Held while `_growing` changes (the step loop's matcher() and the pool's builds)."""

    @property
    def lanes(self) -> int:
        """Lanes built so far."""
        return len(self._templates)

    def matcher(self, lane: int = 0, pool: ThreadPoolExecutor | None = None) -> Any:
        """A fresh matcher of the constraint; it shares its lexer with the other matchers of `lane` (taken
        modulo the lanes built). `pool`: where more lanes are built while more matchers live than lanes."""
        self._live += 1
        if pool is not None:
            self._schedule(pool)
        return self.copy(lane)

    def copy(self, lane: int) -> Any:
        """A fresh matcher of lane `lane` (modulo the lanes built), not counted as live: for a live matcher
        moving there."""
        return self._templates[lane % len(self._templates)].deep_copy()

    def release(self) -> None:
        """A matcher taken from it is done; with none left, a large constraint lets its other lanes go."""
        self._live -= 1
        if self._live == 0 and self.trim_when_idle and len(self._templates) > 1:
            self._templates = self._templates[:1]

    @property
    def growing(self) -> bool:
        """Whether a lane is being built in the pool."""
        return self._growing is not None

    def grow(self) -> None:
        """Build every lane not built yet, now, on this thread (benchmarks and tests: the steady state of a
        constraint many requests use), once the pool's lane under way is built."""
        while (task := self._growing) is not None:  # each task queues the next before it ends, or clears it
            task.result()
        while len(self._templates) < self._want:
            self._templates.append(self._make())  # type: ignore[misc]

    @property
    def live(self) -> int:
        """Matchers taken and not released."""
        return self._live

    @property
    def short_of_lanes(self) -> bool:
        """Whether more matchers live than lanes are built, and more lanes may be built for them."""
        return len(self._templates) < min(self._live, self._want)

    def _schedule(self, pool: ThreadPoolExecutor) -> None:
        """Queue the next lane's build unless one is queued or no more are wanted."""
        with self._lock:
            if self._growing is None and self.short_of_lanes:
                try:
                    self._growing = pool.submit(self._grow_one, pool)
                except RuntimeError:  # the compiler closed: the lanes built are what there is
                    pass

    def _grow_one(self, pool: ThreadPoolExecutor) -> None:
        """One more lane, then the next one queued, behind whatever the pool was given meanwhile, while more
        matchers live than lanes (counted again after the build). The next task is queued before this one
        ends, so a waiter that sees this one done sees the next; a compile that fails ends the growing
        (until the next matcher), the lanes built staying."""
        try:
            if self.short_of_lanes:
                template = self._make()  # type: ignore[misc]
                if self.short_of_lanes:  # still wanted once compiled
                    self._templates.append(template)
        finally:
            with self._lock:
                self._growing = None
        self._schedule(pool)


class GrammarCompiler:
    def __init__(
        self,
        tokenizer: Any,
        vocab_size: int,
        eos_token_ids: frozenset[int],
        max_threads: int = 2,
        lanes: int = 1,
        slices: tuple[str, ...] | None = SLICES,
    ) -> None:
        """`slices`: llguidance's slicer sets (grammar.SLICES; None: llguidance's own, for comparison)."""
        if lanes < 1:
            raise ValueError(f"lanes must be at least 1, got {lanes}")
        self.lanes = lanes
        """Templates (independent lexers) per constraint: the most rows of one constraint that fill at once."""
        self._tokenizer_args = (tokenizer, vocab_size, eos_token_ids, slices)
        self._pool = ThreadPoolExecutor(max(1, min(max_threads, os.cpu_count() or 1)), "mopt-grammar")
        self._lock = threading.Lock()
        self._ll_tokenizer: Future | None = None
        self._cache: LruCache[StructuredOutputs, Future[Compiled]] = LruCache(CACHE_SIZE, CACHE_CHARS, spec_chars)

    def submit(self, so: StructuredOutputs) -> Future[Compiled]:
        """The constraint's compile (cached): a future of its Compiled, or of the GrammarError/ValueError
        that says why it cannot be used."""
        with self._lock:
            future = self._cache.get(so)
            if future is not None:
                return future
            if self._ll_tokenizer is None:
                self._ll_tokenizer = self._pool.submit(ll_tokenizer, *self._tokenizer_args)
            future = self._pool.submit(self._compile, so)
            self._cache.put(so, future)
            return future

    def forget(self, so: StructuredOutputs, future: Future) -> None:
        """No request waits for this compile of `so` any more: it is cancelled if it has not started (a queue
        of compiles for clients that left must not hold up the next request's), and dropped from the cache
        unless it finished (a later request compiles anew)."""
        with self._lock:
            if future.cancel():
                self._cache.pop(so, only=future)

    def tokenizer(self) -> Any:
        """The llguidance tokenizer (built on first use; waits for it)."""
        with self._lock:
            if self._ll_tokenizer is None:
                self._ll_tokenizer = self._pool.submit(ll_tokenizer, *self._tokenizer_args)
        return self._ll_tokenizer.result()

    def _compile(self, so: StructuredOutputs) -> Compiled:
        import llguidance as llg

        tokenizer = self.tokenizer()
        grammar, template = matcher(so, tokenizer)
        first_mask = np.frombuffer(template.compute_bitmask(), dtype=np.int32)  # here, not in a step
        if template.is_error():  # a limit met on the first mask: the request fails before it is admitted
            raise GrammarError(f"invalid {so.kind}: {engine_error(template)}")
        make = functools.partial(llg.LLMatcher, tokenizer, grammar, log_level=0)  # a lane's compile
        trim = spec_chars(so) > LANE_TRIM_CHARS
        return Compiled(template, make, self.lanes, trim_when_idle=trim, first_mask=first_mask)

    @property
    def pool(self) -> ThreadPoolExecutor:
        """The compile threads (Compiled builds its other lanes there)."""
        return self._pool

    def close(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)
