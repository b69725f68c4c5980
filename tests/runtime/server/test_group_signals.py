"""`mopt serve` stopped by signals to its whole process group, as a terminal's Ctrl-C and `kill -TERM -PGID`
send them: the engine core gets every one of them too, and must leave the stopping to its frontend.

The server runs in a session (and process group) of its own, so the test can signal the group without
signalling itself. The engine is held from its start (MOPT_HOLD_AFTER_STEPS=0: no step runs), so the
requests are provably in flight whatever the machine's speed; each wait is for a state, bounded only
against a hang.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import httpx
import pytest

from tests.runtime.server.test_core_process import alive, core_pid
from tests.runtime.server.test_process import REPO, _environment, free_port, stream_in_thread, wait_for
from tests.runtime.server.test_shutdown_signals import HELD, LONG, WAIT, finishes, num_waiting, port_is_free


def launch_in_own_group(model: Path, *flags: str, env: dict | None = None) -> tuple[subprocess.Popen, str]:
    """`mopt serve` as the leader of a new session and process group, ready to serve."""
    port = free_port()
    cmd = [sys.executable, "-m", "model_optimizer.cli.main", "serve", "--model", str(model), "--port", str(port)]
    cmd += ["--max-model-len", "512", "--num-kv-blocks", "128", "--log-level", "warning", *flags]
    proc = subprocess.Popen(
        cmd,
        cwd=REPO,
        env=_environment(env),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 300  # a bound on a hang: start-up imports torch and loads the model
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"server exited early: {proc.stdout.read()}")
        try:
            if httpx.get(url + "/ready", timeout=30).status_code == 200:
                return proc, url
        except httpx.TransportError:
            pass
        time.sleep(0.2)
    kill_group(proc)
    raise RuntimeError("server did not become ready")


def kill_group(proc: subprocess.Popen) -> None:
    """Whatever is left of the server's group (clean-up after a failed test)."""
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    proc.wait(WAIT)


def start_stream(url: str, out: dict):
    thread = stream_in_thread(url, {"prompt": "in flight", "stream": True, **LONG}, {}, out)
    wait_for(lambda: num_waiting(url) == 1, WAIT)
    return thread


@pytest.mark.slow
@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_two_group_signals_abort_and_answer_with_the_core_alive_until_told(tiny_model, sig):
    proc, url = launch_in_own_group(tiny_model("qwen3"), "--shutdown-timeout", "300", env=HELD)
    try:
        core = core_pid(proc)
        out: dict = {}
        thread = start_stream(url, out)
        os.killpg(proc.pid, sig)
        wait_for(lambda: httpx.get(url + "/ready", timeout=30).status_code == 503, WAIT)  # draining
        assert alive(core)  # the group's first signal left the core to its frontend
        os.killpg(proc.pid, sig)
        thread.join(WAIT)
        assert out["status"] == 200 and out["events"][-1] == "[DONE]", out
        assert finishes(out["events"]) == ["abort"], out["events"]
        assert proc.wait(WAIT) == 0  # 1 had the engine failed
        output = proc.stdout.read()
        assert "Traceback" not in output and "engine failed" not in output, output
        wait_for(lambda: not alive(core), WAIT)
        assert port_is_free(url)
    finally:
        kill_group(proc)


class LogLines:
    """The server's output, read line by line as it comes (a thread), to wait for what it logs."""

    def __init__(self, proc: subprocess.Popen) -> None:
        self.lines: list[str] = []
        threading.Thread(target=lambda: self.lines.extend(proc.stdout), daemon=True).start()

    def has(self, text: str) -> bool:
        return any(text in line for line in list(self.lines))


def stream_recording_its_end(url: str, out: dict) -> threading.Thread:
    """A held stream in a thread that records how it ended: its events, or the error that cut it."""

    def run() -> None:
        events = []
        try:
            body = {"prompt": "in flight", "stream": True, **LONG}
            with httpx.stream("POST", url + "/v1/completions", json=body, timeout=WAIT) as response:
                events.extend(line[6:] for line in response.iter_lines() if line.startswith("data: "))
            out["events"] = events
        except httpx.HTTPError as exc:
            out["cut"] = exc

    thread = threading.Thread(target=run)
    thread.start()
    wait_for(lambda: num_waiting(url) == 1, WAIT)
    return thread


@pytest.mark.slow
def test_a_third_group_signal_stops_at_once_and_leaves_no_core(tiny_model):
    """Each signal is sent once the server has acted on the one before (one not yet handled would merge with
    it); the third may find the server stopping or gone, and either way nothing is left."""
    flags = ("--shutdown-timeout", "300", "--log-level", "info")
    proc, url = launch_in_own_group(tiny_model("qwen3"), *flags, env=HELD)
    try:
        log = LogLines(proc)
        core = core_pid(proc)
        out: dict = {}
        thread = stream_recording_its_end(url, out)
        os.killpg(proc.pid, signal.SIGINT)
        wait_for(lambda: log.has("draining 1 request"), WAIT)
        os.killpg(proc.pid, signal.SIGINT)
        wait_for(lambda: log.has("again: aborting"), WAIT)
        os.killpg(proc.pid, signal.SIGINT)  # the group's leader is not reaped yet: it is there to signal
        assert proc.wait(WAIT) == 0
        thread.join(WAIT)
        assert "events" in out or "cut" in out  # answered or cut, never left hanging
        wait_for(lambda: not alive(core), WAIT)
        assert port_is_free(url)
    finally:
        kill_group(proc)
