"""Stopping a trial's server finishes even when a second Ctrl-C comes during the SIGTERM grace: the
interrupt waits until the server's group has had its SIGKILL, then is raised as usual. A server that
ignores SIGTERM and sends the test process SIGINT when it gets one makes the second Ctrl-C an event."""

from __future__ import annotations

import os
import signal
import time

import pytest

from model_optimizer.optimizer.tune import server_process
from model_optimizer.optimizer.tune.server_process import ServerProcess
from tests.optimizer.tune.tune_runs import EVENT_TIMEOUT_S, running


def test_a_second_ctrl_c_during_the_grace_still_kills_a_server_that_ignores_sigterm(tmp_path, monkeypatch):
    monkeypatch.setattr(server_process, "STOP_GRACE_S", 1.0)
    ready = tmp_path / "ready"
    # $PPID: this test's process; SIGTERM is answered with a SIGINT to it and otherwise ignored
    script = f"trap 'kill -INT $PPID' TERM; touch {ready}; while :; do sleep 0.1; done"
    server = ServerProcess(["sh", "-c", script], tmp_path / "server.log").__enter__()
    try:
        deadline = time.monotonic() + EVENT_TIMEOUT_S
        while not ready.exists() and time.monotonic() < deadline:  # the trap is set
            time.sleep(0.05)
        with pytest.raises(KeyboardInterrupt):  # raised once the server is stopped, not inside the grace
            server.stop()
        assert server.proc.returncode == -signal.SIGKILL
        assert not running(server.proc.pid)
    finally:
        if server.proc.poll() is None:  # a failure above: the group still runs
            os.killpg(server.proc.pid, signal.SIGKILL)
            server.proc.wait()
