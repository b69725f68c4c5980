"""GrammarCompiler: StructuredOutputs -> a ready llguidance matcher, compiled in threads, cached per constraint.

Compiling never runs inside an engine step: `submit` returns a future at once, a pool thread builds
the llguidance tokenizer (once, on the first constraint: 0.1 s at an 8k vocabulary, seconds at 150k)
and then the constraint's grammar and a first matcher; every request with the same constraint gets a
copy of that matcher (microseconds) instead of compiling again. llguidance drops the GIL while it
compiles, so the step loop runs on meanwhile.

A copy shares its template's lexer (its lazily built automaton) behind one lock, which every mask
and every token of every copy takes for its whole length: masks of copies of one template never
run in parallel, however many threads fill them. So a constraint in use by several requests gets
`lanes` templates, each with a lexer of its own (a compile each, milliseconds, in the background),
and the manager spreads requests over them: rows of different lanes fill in parallel, rows of one
lane share a warm automaton. Its parser limits (lexer fuel, Earley items, grammar
size) turn a pathological grammar into an error, never an endless compile.
"""

from __future__ import annotations

import os
import threading
from collections import OrderedDict
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

from model_optimizer.runtime.structured.grammar import SLICES, ll_tokenizer, matcher
from model_optimizer.runtime.structured.params import StructuredOutputs

CACHE_SIZE = 512
"""Compiled constraints kept (least recently used dropped first)."""


class Compiled:
    """A compiled constraint: pristine matchers (one per lane, each with a lexer of its own) that each
    request's matcher is copied from.

    It starts with one lane; the second request that takes a matcher (the constraint is in use by
    more than one) has the compiler's pool build the other lanes, one at a time, in the background,
    each usable as soon as it is built: a constraint used once costs one compile, and no request
    waits for lanes. Each lane is a task of its own, so that a new constraint's first compile, queued
    meanwhile, waits for one lane, not for all of them (dozens, at 4 lanes a fill thread)."""

    def __init__(self, template: Any, make: Callable[[], Any] | None = None, lanes: int = 1) -> None:
        """`make`: a new template of the constraint (a compile, run in the pool); `lanes`: how many to have."""
        self._templates = [template]
        self._make = make
        self._want = lanes if make is not None else 1
        self._uses = 0
        self._growing: Future | None = None

    @property
    def lanes(self) -> int:
        """Lanes built so far."""
        return len(self._templates)

    def matcher(self, lane: int = 0, pool: ThreadPoolExecutor | None = None) -> Any:
        """A fresh matcher of the constraint; it shares its lexer with the other matchers of `lane` (taken
        modulo the lanes built). `pool`: where the other lanes are built, once a second matcher is taken."""
        self._uses += 1
        if self._uses == 2 and self._want > 1 and pool is not None:
            self._growing = pool.submit(self._grow_one, pool)
        return self._templates[lane % len(self._templates)].deep_copy()

    @property
    def growing(self) -> bool:
        """Whether the other lanes are being (or have been) built in the pool."""
        return self._growing is not None

    def grow(self) -> None:
        """Build the lanes not built yet, now, on this thread (benchmarks and tests: steady state at once),
        once the pool's lane under way is built."""
        while (task := self._growing) is not None:
            task.result()
            if self._growing is task:  # no next lane queued: the pool is done
                break
        while len(self._templates) < self._want:
            self._templates.append(self._make())  # type: ignore[misc]

    def _grow_one(self, pool: ThreadPoolExecutor) -> None:
        """One more lane, then the next one queued behind whatever the pool was given meanwhile. The next
        task is queued before this one ends, so a waiter that sees this one done sees the next."""
        if len(self._templates) < self._want:
            self._templates.append(self._make())  # type: ignore[misc]
        if len(self._templates) < self._want:
            try:
                self._growing = pool.submit(self._grow_one, pool)
            except RuntimeError:  # the compiler closed: the lanes built are what there is
                pass


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
        self._cache: OrderedDict[StructuredOutputs, Future[Compiled]] = OrderedDict()

    def submit(self, so: StructuredOutputs) -> Future[Compiled]:
        """The constraint's compile (cached): a future of its Compiled, or of the GrammarError/ValueError
        that says why it cannot be used."""
        with self._lock:
            future = self._cache.get(so)
            if future is not None:
                self._cache.move_to_end(so)
                return future
            if self._ll_tokenizer is None:
                self._ll_tokenizer = self._pool.submit(ll_tokenizer, *self._tokenizer_args)
            future = self._pool.submit(self._compile, so)
            self._cache[so] = future
            if len(self._cache) > CACHE_SIZE:
                self._cache.popitem(last=False)
            return future

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
        return Compiled(template, lambda: llg.LLMatcher(tokenizer, grammar, log_level=0), self.lanes)

    @property
    def pool(self) -> ThreadPoolExecutor:
        """The compile threads (Compiled builds its other lanes there)."""
        return self._pool

    def close(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)
