"""Helpers for the tensor-parallel tests that watch worker processes come and go (Linux: /proc)."""

from __future__ import annotations

import time
from pathlib import Path


def alive(pids: list[int]) -> list[int]:
    """The pids still running. A zombie (exited, waiting for its parent to reap it) holds no memory
    any more, so it counts as gone; so does a pid without /proc entry."""
    running = []
    for pid in pids:
        try:
            stat = Path(f"/proc/{pid}/stat").read_text()
        except OSError:
            continue
        if stat.rsplit(")", 1)[1].split()[0] != "Z":  # the state letter follows the command name
            running.append(pid)
    return running


def spawned_children(parent: int) -> list[int]:
    """Pids of `parent`'s children started by multiprocessing's spawn (its workers, not its resource tracker)."""
    children = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            ppid = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ")
        except (OSError, IndexError, ValueError):
            continue  # gone meanwhile
        if ppid == parent and b"spawn_main" in cmdline:
            children.append(int(entry.name))
    return sorted(children)


def wait_gone(pids: list[int], timeout: float = 120.0) -> list[int]:
    """Wait until none of `pids` runs; returns those still running at `timeout` (a bound on a hang, not a
    measurement: the tests assert that the list is empty)."""
    deadline = time.monotonic() + timeout
    while alive(pids) and time.monotonic() < deadline:
        time.sleep(0.1)
    return alive(pids)
