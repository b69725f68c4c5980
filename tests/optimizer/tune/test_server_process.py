"""ServerProcess: a server that exits or never gets ready is a ServerFailed naming why, and stopping it
ends its whole process group, grandchildren included."""

from __future__ import annotations

import sys
import time

import pytest

from model_optimizer.optimizer.tune.server_process import ServerFailed, ServerProcess, free_port
from tests.optimizer.tune.tune_runs import running


def test_exit_before_ready_is_reported_with_the_log(tmp_path):
    with ServerProcess(["sh", "-c", "echo no model here; exit 3"], tmp_path / "server.log") as server:
        with pytest.raises(ServerFailed, match="exited with code 3 before ready: no model here"):
            server.wait_ready(f"http://127.0.0.1:{free_port()}/ready", timeout=120)


def test_never_ready_is_stopped_with_its_children(tmp_path):
    child_pid = tmp_path / "child.pid"
    script = f"sleep 300 & echo $! > {child_pid}; wait"
    with ServerProcess(["sh", "-c", script], tmp_path / "server.log") as server:
        while not child_pid.is_file() or not child_pid.read_text().strip():
            time.sleep(0.05)
        with pytest.raises(ServerFailed, match="not ready"):
            server.wait_ready(f"http://127.0.0.1:{free_port()}/ready", timeout=0.5)  # nothing ever listens there
    grandchild = int(child_pid.read_text())
    deadline = time.monotonic() + 30  # a signal's delivery is not instant on a loaded machine: a bound, not a speed
    while running(grandchild) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not running(grandchild), f"grandchild {grandchild} survived the group kill"
    assert (tmp_path / "server.pid").read_text().strip() == str(server.proc.pid)


def test_a_missing_program_is_a_server_failure(tmp_path):
    with pytest.raises(ServerFailed, match="cannot start"):
        with ServerProcess(["/nonexistent/server"], tmp_path / "server.log"):
            pass


def test_ready_server_reports_cold_start(tmp_path):
    port = free_port()
    code = (
        "import http.server, sys; http.server.HTTPServer(('127.0.0.1', int(sys.argv[1])), "
        "http.server.SimpleHTTPRequestHandler).serve_forever()"
    )
    with ServerProcess([sys.executable, "-c", code, str(port)], tmp_path / "server.log") as server:
        cold = server.wait_ready(f"http://127.0.0.1:{port}/", timeout=120)
        assert cold > 0 and server.alive()
        assert server.peak_rss_bytes() > 0
    assert not server.alive()


def test_a_stop_signal_between_launch_and_record_leaves_no_server(tmp_path, monkeypatch):
    """Ctrl-C landing after the server started but before it was recorded waits for the record, then stops
    the server: raised inside __enter__, it skipped __exit__ and left an unrecorded server running (the
    orphan a SIGTERM test left behind in a clean-clone CI run)."""
    import os
    import signal

    import model_optimizer.optimizer.tune.server_process as server_process

    real = server_process.process_start_time

    def interrupted(pid: int) -> int | None:
        os.kill(os.getpid(), signal.SIGINT)  # the signal arrives here, between the launch and its record
        return real(pid)

    monkeypatch.setattr(server_process, "process_start_time", interrupted)
    server = ServerProcess([sys.executable, "-c", "import time; time.sleep(60)"], tmp_path / "server.log")
    with pytest.raises(KeyboardInterrupt):
        with server:
            pass
    assert server.proc is not None and server.proc.poll() is not None  # stopped and reaped
    assert (tmp_path / "server.json").is_file()  # recorded before the signal was let through
