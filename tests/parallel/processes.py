"""Helpers for the tensor-parallel tests that watch worker processes come and go."""

from __future__ import annotations

import time

import psutil


def alive(pids: list[int]) -> list[int]:
    """The pids still running (a zombie waiting for its parent to reap it has stopped: it holds no memory)."""
    running = []
    for pid in pids:
        try:
            if psutil.Process(pid).status() != psutil.STATUS_ZOMBIE:
                running.append(pid)
        except psutil.NoSuchProcess:
            pass
    return running


def wait_gone(pids: list[int], timeout: float = 120.0) -> list[int]:
    """Wait until none of `pids` runs; returns those still running at `timeout` (a bound on a hang, not a
    measurement: the tests assert that the list is empty)."""
    deadline = time.monotonic() + timeout
    while alive(pids) and time.monotonic() < deadline:
        time.sleep(0.1)
    return alive(pids)
