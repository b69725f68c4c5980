"""Constraint checks in a process of their own, so that a grammar that crashes llguidance costs one 400.

llguidance (1.9.1) can die on some inputs rather than refuse them: a segfault on an integer `const` of
-2**63, a stack overflow on thousands of chained Lark rules or a `$ref` chain a thousand deep. In the
server's own process that would end every request in flight. Here each constraint is compiled, as
the engine core will compile it (`grammar.check` against the model's llguidance tokenizer, then a
matcher and its first mask), in a child interpreter. A crash, or a check past its time, kills only
the child: the verdict is a reason to refuse, and the next check starts a fresh child. Being the same
checks with the same tokenizer, a constraint that passes here does not crash the core.

The child is a fresh interpreter (`python -m` this module), not a multiprocessing child, which would
import the caller's main module again. Frames on its stdin and stdout are pickles with a length
prefix; its own prints (llguidance warns on stdout) go to stderr.
"""

from __future__ import annotations

import os
import pickle
import select
import struct
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from typing import Any

from model_optimizer.runtime.structured.params import StructuredOutputs

START_TIMEOUT_S = 120.0
"""Longest a child may take to start and build the llguidance tokenizer (seconds for a 150k vocabulary)."""
MAX_MASK_S = 0.5
"""Longest one token mask of a constraint may take here before it is refused: the engine fills every
step's masks before that step samples, so a constraint whose masks take seconds (thousands of properties
with patterns) would stall every request in the batch at every token. Typical masks take well under a
millisecond a row."""


@dataclass(frozen=True)
class TokenizerSpec:
    """What the child builds its llguidance tokenizer from (grammar.ll_tokenizer's arguments)."""

    tokenizer_json: str
    vocab_size: int
    eos_token_ids: tuple[int, ...]


class SandboxUnavailable(RuntimeError):
    """The child process could not start: no verdict on the constraint (callers must not keep this)."""


class GrammarSandbox:
    """One child process that checks constraints one at a time (callers block: run it off the event loop)."""

    def __init__(self, spec: TokenizerSpec, timeout_s: float) -> None:
        self.spec = spec
        self.timeout_s = timeout_s
        self._lock = threading.Lock()
        self._child: subprocess.Popen | None = None
        self.restarts = 0
        """Children that crashed or were killed for their time (tests and logs read it)."""

    def check(self, so: StructuredOutputs) -> str:
        """ "" when the constraint compiles and yields a first mask; otherwise why it cannot be used (a
        verdict: running out of time counts, a constraint that takes that long being one to refuse).
        SandboxUnavailable, with the reason for the client, when the child could not start."""
        with self._lock:
            try:
                child = self._started()
            except (OSError, EOFError, TimeoutError) as exc:
                self._kill()
                raise SandboxUnavailable(f"the grammar engine could not start ({exc}); try again") from None
            try:
                _send(child.stdin, so)
                return _receive(child, self.timeout_s)
            except TimeoutError:
                self._kill()
                return (
                    f"the grammar engine could not validate this {so.kind} within {self.timeout_s:.0f} s; simplify it"
                )
            except (EOFError, OSError, pickle.UnpicklingError):
                self._kill()
                return f"the grammar engine failed on this {so.kind} (its process ended); simplify it"

    def close(self) -> None:
        """Kill the child (a check under way then ends as a refusal; the lock is not waited for)."""
        child = self._child
        if child is not None:
            child.kill()
            child.wait()

    def _started(self) -> subprocess.Popen:
        if self._child is not None and self._child.poll() is None:
            return self._child
        if self._child is not None:
            self._kill()
        child = subprocess.Popen(
            [sys.executable, "-m", __name__],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            env={**os.environ, "PYTHONUNBUFFERED": "1"},
        )
        self._child = child
        _send(child.stdin, self.spec)
        ready = _receive(child, START_TIMEOUT_S)
        if ready:
            raise OSError(ready)
        return child

    def _kill(self) -> None:
        child, self._child = self._child, None
        if child is not None:
            self.restarts += 1
            child.kill()
            child.wait()


def _send(stream: Any, value: Any) -> None:
    """One frame: the pickle's length, then the pickle (both ways of the pipe)."""
    data = pickle.dumps(value)
    stream.write(struct.pack("<Q", len(data)) + data)
    stream.flush()


def _receive(child: subprocess.Popen, timeout_s: float) -> Any:
    """The child's next frame; TimeoutError past `timeout_s`, EOFError when it ended."""
    stream = child.stdout
    deadline = time.monotonic() + timeout_s
    head = _read(stream, 8, deadline)
    return pickle.loads(_read(stream, struct.unpack("<Q", head)[0], deadline))


def _read(stream: Any, size: int, deadline: float) -> bytes:
    out = b""
    while len(out) < size:
        left = deadline - time.monotonic()
        if left <= 0 or not select.select([stream], [], [], left)[0]:
            raise TimeoutError
        chunk = os.read(stream.fileno(), size - len(out))
        if not chunk:
            raise EOFError
        out += chunk
    return out


def verdict(so: StructuredOutputs, tokenizer: Any) -> str:
    """The engine core's compile of `so`, as far as its first mask, one token it allows and the mask after
    it: "" or the reason it fails. The token matters: llguidance meets some of its limits (a schema that
    can never end, a regex that builds too many states, a choice of over 2,000 alternatives) only when a
    matcher takes its first token, which in the core would fail the request after it was admitted. Either
    mask taking over MAX_MASK_S refuses the constraint too (the engine would stall on it at every step)."""
    import numpy as np

    from model_optimizer.runtime.structured.grammar import GrammarError, engine_error, matcher

    try:
        _, template = matcher(so, tokenizer)
    except GrammarError as exc:
        return str(exc)
    for step in ("first", "second"):
        if template.is_stopped():  # its first token ended it (an EOS)
            break
        start = time.perf_counter()
        words = np.frombuffer(template.compute_bitmask(), dtype=np.uint32)
        took = time.perf_counter() - start
        if template.is_error():
            return f"invalid {so.kind}: {engine_error(template)}"
        allowed = np.flatnonzero(words)
        if allowed.size:  # the engine's own reason first, where it has one
            word = int(words[allowed[0]])
            token = int(allowed[0]) * 32 + (word & -word).bit_length() - 1
            if not template.consume_token(token):
                return f"invalid {so.kind}: the grammar engine fails on its {step} token ({engine_error(template)}); simplify it"
        if took > MAX_MASK_S:
            return (
                f"this {so.kind}'s {step} token mask took {took:.2f} s (at most {MAX_MASK_S} s: the engine computes "
                "one for every token of every constrained request); simplify it"
            )
        if not allowed.size:
            break
    return ""


def _serve() -> None:
    """The child: build the tokenizer from the first frame, then answer each constraint with its verdict."""
    channel_in, channel_out = sys.stdin.buffer, os.fdopen(os.dup(1), "wb")
    os.dup2(2, 1)  # anything printed from here on (llguidance's warnings) goes to stderr

    def frame() -> Any:
        head = channel_in.read(8)
        if len(head) < 8:
            raise SystemExit(0)  # the server closed the pipe: done
        return pickle.loads(channel_in.read(struct.unpack("<Q", head)[0]))

    from model_optimizer.runtime.structured.grammar import ll_tokenizer_from_json

    spec = frame()
    try:
        tokenizer = ll_tokenizer_from_json(spec.tokenizer_json, spec.vocab_size, spec.eos_token_ids)
    except ValueError as exc:
        _send(channel_out, str(exc))
        return
    _send(channel_out, "")
    while True:
        _send(channel_out, verdict(frame(), tokenizer))


if __name__ == "__main__":
    _serve()
