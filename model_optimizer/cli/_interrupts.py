"""SIGTERM answered as Ctrl-C by the commands that build their output in a staging folder (`quantize`,
`export-onnx`): inside `sigterm_raises(Terminated)` the clean-up that removes the half-built folder
runs, instead of the process ending at once and leaving a hidden copy of the model (gigabytes, for
a large one) beside the output."""

from __future__ import annotations

import sys


class Terminated(KeyboardInterrupt):
    """SIGTERM (`kill`, `timeout`, a batch scheduler's end of job), raised where Ctrl-C would be."""


def report_stop(command: str, exc: KeyboardInterrupt, outcome: str) -> int:
    """Say on stderr what stopped `mopt COMMAND` and what it left (`outcome`); return the exit code a
    shell reports for that signal: 143 for SIGTERM, 130 for Ctrl-C."""
    what = "terminated (SIGTERM)" if isinstance(exc, Terminated) else "interrupted"
    print(f"mopt {command}: {what}; {outcome}", file=sys.stderr, flush=True)
    return 143 if isinstance(exc, Terminated) else 130
