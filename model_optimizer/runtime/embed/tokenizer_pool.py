"""Tokenize one call's inputs on worker threads, chunk by chunk, ahead of the model.

Tokenizing is host work that a GPU forward pass does not wait for: while the GPU runs the
batches of one chunk, worker threads tokenize the next ones (the Rust tokenizer releases the GIL).
On one thread, tokenizing a large call was a large share of its time on a GPU, all of it before the
first batch could start (README "Embeddings" > "Benchmark").

Chunks go longest input first, by characters (a text's length before tokenizing), which is the
order batches are packed in; a call small enough for one chunk is tokenized on the caller's thread.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor

from model_optimizer.runtime.embed.inputs import EmbedInput

CHUNK_CHARS = 16384
"""Characters of text per chunk (about 4k tokens of English): small enough that the first batch
starts early, large enough that a chunk's overhead (a thread hand-off, ~0.1 ms) stays negligible."""

CHARS_PER_TOKEN_ID = 4
"""How a token-id input counts against CHUNK_CHARS."""

Prepare = Callable[[list[EmbedInput], list[int]], list[list[int]]]
"""(inputs of a chunk, their positions in the call) -> their token ids."""


def default_num_threads() -> int:
    """The CPUs this process may run on, at most 8 (the tokenizer's own Rust threads come on top)."""
    usable = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    return max(1, min(8, usable))


def plan_chunks(items: Sequence[EmbedInput], chunk_chars: int) -> list[list[int]]:
    """Input positions grouped into chunks of about `chunk_chars`, longest input first."""
    sizes = [len(x) if isinstance(x, str) else CHARS_PER_TOKEN_ID * len(x) for x in items]
    order = sorted(range(len(items)), key=sizes.__getitem__, reverse=True)
    chunks: list[list[int]] = []
    current: list[int] = []
    chars = 0
    for i in order:
        current.append(i)
        chars += sizes[i] + 1  # + 1: empty inputs still count
        if chars >= chunk_chars:
            chunks.append(current)
            current, chars = [], 0
    if current:
        chunks.append(current)
    return chunks


class TokenizerPool:
    """Runs `prepare` over the chunks of a call on `num_threads` threads (0: on the caller's thread)."""

    def __init__(self, num_threads: int, chunk_chars: int = CHUNK_CHARS) -> None:
        self.num_threads = num_threads
        self.chunk_chars = chunk_chars
        self._executor = ThreadPoolExecutor(num_threads, thread_name_prefix="mopt-tokenize") if num_threads else None

    def chunks(self, items: Sequence[EmbedInput], prepare: Prepare) -> Iterator[tuple[list[int], list[list[int]]]]:
        """(input positions, their token ids) per chunk, in chunk order, each as soon as it is ready.
        With worker threads an error in a chunk is raised when that chunk is reached (over-long texts
        come first: chunks go longest first) and chunks not yet started are dropped; on the caller's
        thread every chunk is tokenized before the first is handed out, so errors come before any batch."""
        plan = plan_chunks(items, self.chunk_chars)
        if self._executor is None or len(plan) == 1:
            yield from [(rows, prepare([items[i] for i in rows], rows)) for rows in plan]
            return
        futures: list[Future] = [self._executor.submit(prepare, [items[i] for i in rows], rows) for rows in plan]
        try:
            for rows, future in zip(plan, futures):
                yield rows, future.result()
        finally:  # an error here or in the caller's loop: do not tokenize what nobody will read
            for future in futures:
                future.cancel()
