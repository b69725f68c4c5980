"""An engine core that stops answering (stopped with SIGSTOP: a real process state, as a stuck step would
leave it) under a real `mopt serve`: /health turns 503 with an OpenAI error body once a ping has waited
past MOPT_ENGINE_HANG_TIMEOUT_S (short here), new requests are refused, the running request waits, and
after SIGCONT the server serves on as before; stopped while hung, the server still leaves no core behind.

The engine is held from its start (MOPT_HOLD_AFTER_STEPS=0: no step runs), so the request is provably in
flight; each wait is for a state, bounded only against a hang.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import httpx
import pytest

from model_optimizer.runtime.engine.hang_watch import DEFAULT_HANG_TIMEOUT_S, HANG_TIMEOUT_ENV, hang_timeout_s
from tests.runtime.server.test_core_process import alive, core_pid
from tests.runtime.server.test_process import REPO, launch, paused, stream_in_thread, wait_for
from tests.runtime.server.test_shutdown_signals import WAIT, finishes, num_waiting

HANG_TIMEOUT_S = 4.0
HELD = {"MOPT_HOLD_AFTER_STEPS": "0", "MOPT_API_KEY": None, "MOPT_ENGINE_HANG_TIMEOUT_S": str(HANG_TIMEOUT_S)}


def health(url: str) -> httpx.Response:
    return httpx.get(url + "/health", timeout=30)


def held_stream(url: str, out: dict, max_tokens: int = 8):
    body = {"prompt": "in flight", "stream": True, "max_tokens": max_tokens, "ignore_eos": True}
    thread = stream_in_thread(url, body, {}, out)
    wait_for(lambda: num_waiting(url) == 1, WAIT)
    return thread


@pytest.mark.slow
def test_a_stopped_core_turns_health_503_and_serves_on_once_continued(tiny_model):
    proc, url = launch(tiny_model("qwen3"), "--enable-pause", "--shutdown-timeout", "300", env=HELD)
    core = core_pid(proc)
    try:
        out: dict = {}
        thread = held_stream(url, out)
        settled = time.monotonic() + HANG_TIMEOUT_S + 2.0  # past the bound and a ping period (a quarter of it)
        while time.monotonic() < settled:  # held, with work in it: it still answers every ping
            assert health(url).status_code == 200
            time.sleep(0.2)
        os.kill(core, signal.SIGSTOP)
        wait_for(lambda: health(url).status_code == 503, WAIT)
        error = health(url).json()["error"]
        assert error["code"] == 503 and error["type"] == "service_unavailable", error
        assert "has not answered" in error["message"]
        ready = httpx.get(url + "/ready", timeout=30)
        assert ready.status_code == 503 and ready.json() == {"status": "unresponsive"}
        refused = httpx.post(url + "/v1/completions", json={"prompt": "new", "max_tokens": 2}, timeout=30)
        assert refused.status_code == 503 and refused.headers["retry-after"], refused.text
        assert "has not answered" in refused.json()["error"]["message"]
        assert thread.is_alive() and "events" not in out  # not failed: it waits for the core
        os.kill(core, signal.SIGCONT)
        wait_for(lambda: health(url).status_code == 200, WAIT)
        assert httpx.get(url + "/ready", timeout=30).json() == {"status": "ready"}
        paused(url, {}, False)  # /resume releases the test hook's hold too
        thread.join(WAIT)
        assert out["status"] == 200 and out["events"][-1] == "[DONE]", out
        assert finishes(out["events"]) == ["length"]
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(WAIT) == 0
        wait_for(lambda: not alive(core), WAIT)
    finally:
        if alive(core):
            os.kill(core, signal.SIGKILL)  # a stopped core whose parent died would wait for SIGCONT forever
        proc.kill()


@pytest.mark.slow
def test_a_hung_core_is_killed_when_the_server_stops_and_its_request_answered(tiny_model):
    proc, url = launch(tiny_model("qwen3"), "--shutdown-timeout", "300", env=HELD)
    core = core_pid(proc)
    try:
        out: dict = {}
        thread = held_stream(url, out, max_tokens=400)
        os.kill(core, signal.SIGSTOP)
        wait_for(lambda: health(url).status_code == 503, WAIT)
        proc.send_signal(signal.SIGTERM)  # drains: the hung core's request is still in flight
        late = {"prompt": "late", "max_tokens": 2}
        wait_for(lambda: "shutting down" in httpx.post(url + "/v1/completions", json=late, timeout=30).text, WAIT)
        proc.send_signal(signal.SIGTERM)  # aborts and answers it, without the core
        thread.join(WAIT)
        assert out["status"] == 200 and out["events"][-1] == "[DONE]", out
        assert finishes(out["events"]) == ["abort"]
        assert proc.wait(WAIT) == 0
        wait_for(lambda: not alive(core), WAIT)
    finally:
        if alive(core):
            os.kill(core, signal.SIGKILL)
        proc.kill()


@pytest.mark.slow
def test_a_bad_hang_timeout_is_a_clear_error_before_the_server_starts(tiny_model):
    env = {**os.environ, "MOPT_ENGINE_HANG_TIMEOUT_S": "soon"}
    cmd = [
        sys.executable,
        "-m",
        "model_optimizer.cli.main",
        "serve",
        "--model",
        str(tiny_model("qwen3")),
        "--port",
        "0",
    ]
    run = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=WAIT)
    assert run.returncode == 2, run.stderr
    assert "MOPT_ENGINE_HANG_TIMEOUT_S='soon'" in run.stderr and "Traceback" not in run.stderr


@pytest.mark.parametrize("text, seconds", [("", DEFAULT_HANG_TIMEOUT_S), (" 2.5 ", 2.5), ("0", 0.0)])
def test_the_hang_timeout_comes_from_the_environment(monkeypatch, text, seconds):
    monkeypatch.setenv(HANG_TIMEOUT_ENV, text)
    assert hang_timeout_s() == seconds


@pytest.mark.parametrize("text", ["-1", "nan", "inf", "2m"])
def test_a_hang_timeout_that_is_not_seconds_is_refused(monkeypatch, text):
    monkeypatch.setenv(HANG_TIMEOUT_ENV, text)
    with pytest.raises(ValueError, match=r"a number >= 0 \(0 turns the check off"):
        hang_timeout_s()
