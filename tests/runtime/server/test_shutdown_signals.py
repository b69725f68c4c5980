"""Stopping `mopt serve` with requests in flight, as operators and supervisors do it, and its engine core dying
under several frontends.

- A second SIGINT or SIGTERM (an impatient Ctrl-C, a supervisor's repeated stop) aborts what the drain
  left, answers it (finish_reason "abort", a stream's [DONE]) and exits 0: no cut streams, no plain-text
  500s, no tracebacks, no engine core left, the port free.
- With --api-server-count 2, a Ctrl-C reaches every process: the further frontend gets the group's SIGINT
  and the first frontend's SIGTERM, and both start its one drain (neither is a second signal to it).
- A killed engine core ends the streams of every frontend with an error that says what happened.

The engine is held from its start (MOPT_HOLD_AFTER_STEPS=0: no step runs), so the requests are provably
in flight whatever the machine's speed; each wait is for a state, bounded only against a hang.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import threading
from urllib.parse import urlsplit

import httpx
import psutil
import pytest

from tests.runtime.server.test_core_process import alive, children
from tests.runtime.server.test_process import launch, num_queued, stream_in_thread, wait_for

WAIT = 120.0  # a bound on a hang, never waited out when the server behaves
HELD = {"MOPT_HOLD_AFTER_STEPS": "0", "MOPT_API_KEY": None}
LONG = {"max_tokens": 400, "ignore_eos": True}


def post_in_thread(url: str, body: dict, out: dict) -> threading.Thread:
    def run() -> None:
        out["response"] = httpx.post(url + "/v1/completions", json=body, timeout=WAIT)

    thread = threading.Thread(target=run)
    thread.start()
    return thread


def frontends_and_core(proc, url: str) -> tuple[list[int], int]:
    """The further frontends (they hold the listening socket) and the engine core of a `mopt serve`."""
    port = urlsplit(url).port
    pids = [p for p in children(proc.pid) if "resource_tracker" not in open(f"/proc/{p}/cmdline").read()]
    listening = [
        p
        for p in pids
        if any(c.laddr.port == port and c.status == "LISTEN" for c in psutil.Process(p).net_connections("tcp"))
    ]
    cores = [p for p in pids if p not in listening]
    assert len(cores) == 1, (pids, listening)
    return listening, cores[0]


def num_waiting(url: str) -> float:
    """Requests queued in the engine, as /metrics says; 0 from a frontend that has no engine gauges yet (the
    core's first stats have not reached it)."""
    try:
        return num_queued(url)
    except KeyError:
        return 0


def finishes(events: list[str]) -> list[str]:
    return [c["finish_reason"] for e in events[:-1] for c in json.loads(e)["choices"] if c["finish_reason"]]


def port_is_free(url: str) -> bool:
    """Nothing listens on the server's port any more (a TIME_WAIT left by closed connections is no matter)."""
    with socket.socket() as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind(("127.0.0.1", urlsplit(url).port))
        except OSError:
            return False
    return True


def ended_cleanly(proc, core: int, url: str) -> None:
    assert proc.wait(WAIT) == 0
    output = proc.stdout.read()
    assert "Traceback" not in output and "Exception in ASGI application" not in output, output
    wait_for(lambda: not alive(core), WAIT)
    assert port_is_free(url)


@pytest.mark.slow
@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_a_second_signal_aborts_what_the_drain_left_and_answers_it(tiny_model, sig):
    proc, url = launch(tiny_model("qwen3"), "--shutdown-timeout", "300", env=HELD)
    try:
        _, core = frontends_and_core(proc, url)
        streamed: dict = {}
        plain: dict = {}
        threads = [
            stream_in_thread(url, {"prompt": "streamed", "stream": True, **LONG}, {}, streamed),
            post_in_thread(url, {"prompt": "plain", **LONG}, plain),
        ]
        wait_for(lambda: num_waiting(url) == 2)
        proc.send_signal(sig)
        wait_for(lambda: httpx.get(url + "/ready", timeout=30).status_code == 503)  # draining; nothing can finish
        proc.send_signal(sig)
        for thread in threads:
            thread.join(WAIT)
        assert streamed["status"] == 200 and streamed["events"][-1] == "[DONE]"
        assert finishes(streamed["events"]) == ["abort"]
        response = plain["response"]
        assert response.status_code == 200, response.text
        assert [c["finish_reason"] for c in response.json()["choices"]] == ["abort"]
        ended_cleanly(proc, core, url)
    finally:
        proc.kill()


@pytest.mark.slow
def test_a_ctrl_c_to_every_frontend_drains_the_further_one_too(tiny_model):
    """The further frontend's request is still waited for after the group's SIGINT and the first frontend's
    SIGTERM, until its drain's own timeout aborts it: had the second of them ended its drain, uvicorn's 5 s
    shutdown grace would have cut the stream first."""
    proc, url = launch(tiny_model("qwen3"), "--api-server-count", "2", "--shutdown-timeout", "10", env=HELD)
    try:
        (further,), core = frontends_and_core(proc, url)
        out: dict = {}
        os.kill(proc.pid, signal.SIGSTOP)  # only the further frontend accepts while the first is stopped
        try:
            thread = stream_in_thread(url, {"prompt": "on the further frontend", "stream": True, **LONG}, {}, out)
            wait_for(lambda: num_waiting(url) == 1)
        finally:
            os.kill(proc.pid, signal.SIGCONT)
        for pid in (further, core, proc.pid):  # a Ctrl-C: SIGINT to the whole process group
            os.kill(pid, signal.SIGINT)
        thread.join(WAIT)
        assert out["status"] == 200 and out["events"][-1] == "[DONE]"
        assert finishes(out["events"]) == ["abort"]
        ended_cleanly(proc, core, url)
        assert not alive(further)
    finally:
        proc.kill()


@pytest.mark.slow
def test_kill_9_of_the_core_ends_the_streams_of_every_frontend_saying_so(tiny_model):
    proc, url = launch(tiny_model("qwen3"), "--api-server-count", "2", env=HELD)
    try:
        (further,), core = frontends_and_core(proc, url)
        outs: list[dict] = [{}, {}]
        os.kill(proc.pid, signal.SIGSTOP)  # the first stream goes to the further frontend
        try:
            threads = [stream_in_thread(url, {"prompt": "one", "stream": True, **LONG}, {}, outs[0])]
            wait_for(lambda: num_waiting(url) == 1)
        finally:
            os.kill(proc.pid, signal.SIGCONT)
        threads.append(stream_in_thread(url, {"prompt": "two", "stream": True, **LONG}, {}, outs[1]))
        wait_for(lambda: num_waiting(url) == 2)
        os.kill(core, signal.SIGKILL)
        for thread in threads:
            thread.join(WAIT)
        for out in outs:
            assert out["events"][-1] == "[DONE]"
            error = json.loads(out["events"][-2])["error"]
            assert error["code"] == 500 and "engine core process exited" in error["message"]
            assert "None" not in error["message"], error  # a frontend that cannot know the exit code does not guess
        assert proc.wait(WAIT) != 0  # a supervisor restarts it
        wait_for(lambda: not alive(further), WAIT)
    finally:
        proc.kill()
