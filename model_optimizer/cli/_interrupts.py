"""SIGTERM answered as Ctrl-C: inside `sigterm_raises(Terminated)` `generate` writes the results that
finished, and the commands that build their output in a staging folder (`quantize`, `export-onnx`) run
the clean-up that removes the half-built folder, instead of the process ending at once and leaving a
hidden copy of the model (gigabytes, for a large one) beside the output."""

from __future__ import annotations

import sys


class Terminated(KeyboardInterrupt):
    """SIGTERM (`kill`, `timeout`, a batch scheduler's end of job), raised where Ctrl-C would be."""


def stop_word(exc: KeyboardInterrupt) -> str:
    """What stopped the command, as its last line says it."""
    return "terminated (SIGTERM)" if isinstance(exc, Terminated) else "interrupted"


def stop_code(exc: KeyboardInterrupt) -> int:
    """The exit code a shell reports for the signal: 143 (128 + SIGTERM) for SIGTERM, 130 for Ctrl-C."""
    return 143 if isinstance(exc, Terminated) else 130


def report_stop(command: str, exc: KeyboardInterrupt, outcome: str) -> int:
    """Say on stderr what stopped `mopt COMMAND` and what it left (`outcome`); return stop_code."""
    print(f"mopt {command}: {stop_word(exc)}; {outcome}", file=sys.stderr, flush=True)
    return stop_code(exc)
