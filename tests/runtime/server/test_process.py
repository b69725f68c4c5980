"""`mopt serve` as a real process: SIGTERM drains, an engine fault gives 503 and a non-zero exit.
Start-up (configuration errors, load before bind, logs) is in test_startup.py.

The servers run with --enable-pause: a test pauses the engine (POST /pause) before sending its
requests, waits until /metrics shows them queued, and resumes it when it wants them to run, so a
request is provably in flight when SIGTERM or the injected fault arrives, on a fast or slow machine."""

from __future__ import annotations

import json
import os
import signal
import socket
import ssl
import subprocess
import sys
import threading
import time
from pathlib import Path

import httpx
import pytest

from tests.runtime.server.live import metric

REPO = Path(__file__).resolve().parents[3]
KEY = "sk-process-test"
TEMPLATE = "{% for m in messages %}[{{ m['role'] }}] {{ m['content'] }}\n{% endfor %}[assistant] "


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _environment(changes: dict | None) -> dict:
    """os.environ with `changes` applied (a None value removes the variable)."""
    merged = {**os.environ, **(changes or {})}
    return {k: v for k, v in merged.items() if v is not None}


def _launch_once(model: Path, flags: tuple, env: dict | None) -> tuple[subprocess.Popen, str] | None:
    """The server on a free port; None when another process took that port before the server bound it."""
    port = free_port()
    cmd = [
        sys.executable,
        "-m",
        "model_optimizer.cli.main",
        "serve",
        "--model",
        str(model),
        "--port",
        str(port),
        "--max-model-len",
        "512",
        "--num-kv-blocks",
        "128",
        "--log-level",
        "warning",
        *flags,
    ]
    proc = subprocess.Popen(
        cmd, cwd=REPO, env=_environment(env), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )
    cert = flags[flags.index("--ssl-certfile") + 1] if "--ssl-certfile" in flags else None
    url = f"{'https' if cert else 'http'}://127.0.0.1:{port}"
    deadline = time.monotonic() + 300  # a bound on a hang: start-up imports torch and loads the model
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            output = proc.stdout.read()
            if "address already in use" in output.lower():
                return None
            raise RuntimeError(f"server exited early: {output}")
        try:
            verify = ssl.create_default_context(cafile=cert) if cert else True
            ready = httpx.get(url + "/ready", timeout=30, verify=verify)  # public: probes carry no key
        except httpx.TransportError:
            pass  # the port is bound only once the model is loaded and warmed up; until then another
            # process may hold it (tensor parallelism's gloo listens on ephemeral ports) and reset us
        else:
            assert ready.status_code == 200 and ready.json() == {"status": "ready"}, ready.text
            return proc, url
        time.sleep(0.2)
    proc.kill()
    raise RuntimeError("server did not become ready")


def launch(model: Path, *flags: str, env: dict | None = None) -> tuple[subprocess.Popen, str]:
    """`mopt serve` in its own process, ready; a new port when the one picked was taken meanwhile."""
    for _ in range(3):
        started = _launch_once(model, flags, env)
        if started is not None:
            return started
    raise RuntimeError("three ports were taken before the server could bind them")


def stream_in_thread(url: str, body: dict, headers: dict, out: dict) -> threading.Thread:
    def run() -> None:
        events = []
        with httpx.stream("POST", url + "/v1/completions", json=body, headers=headers, timeout=60) as r:
            out["status"] = r.status_code
            for line in r.iter_lines():
                if line.startswith("data: "):
                    events.append(line[6:])
        out["events"] = events

    thread = threading.Thread(target=run)
    thread.start()
    return thread


def wait_for(condition, timeout: float = 120.0) -> None:
    """Poll until `condition()` holds: a bound on a hang, never a measurement (it returns at once when it holds)."""
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.01)


def num_queued(url: str) -> float:
    """Sequences waiting in the engine, from /metrics (public: no key)."""
    return metric(httpx.get(url + "/metrics", timeout=10).text, "vllm:num_requests_waiting")


def num_running(url: str) -> float:
    """Sequences running in the engine, from /metrics (public: no key)."""
    return metric(httpx.get(url + "/metrics", timeout=10).text, "vllm:num_requests_running")


def paused(url: str, headers: dict, value: bool) -> None:
    r = httpx.post(url + ("/pause" if value else "/resume"), headers=headers, timeout=60)
    assert r.status_code == 200 and r.json() == {"is_paused": value}, r.text


@pytest.mark.slow
def test_sigterm_drains_in_flight_and_refuses_new(tiny_model, tmp_path):
    template = tmp_path / "template.jinja"
    template.write_text(TEMPLATE)
    proc, url = launch(
        tiny_model("qwen3"),
        "--served-model-name",
        "served",
        "--chat-template",
        str(template),
        "--shutdown-timeout",
        "300",  # the drain ends when the request does: a bound on a hang, never waited out
        "--enable-pause",
        env={"MOPT_API_KEY": KEY, "MOPT_HOLD_AFTER_STEPS": "40"},  # then the engine holds: no API pause
    )
    auth = {"Authorization": f"Bearer {KEY}"}
    try:
        assert httpx.get(url + "/v1/models", timeout=30).status_code == 401  # key from MOPT_API_KEY
        chat = httpx.post(
            url + "/v1/chat/completions",
            headers=auth,
            timeout=30,
            json={"model": "served", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 2},
        ).json()
        from transformers import AutoTokenizer

        tok = AutoTokenizer.from_pretrained(str(tiny_model("qwen3")))
        assert chat["usage"]["prompt_tokens"] == len(tok.encode("[user] hi\n[assistant] ", add_special_tokens=False))

        out: dict = {}
        body = {"prompt": "drain me", "max_tokens": 480, "ignore_eos": True, "stream": True}
        thread = stream_in_thread(url, body, auth, out)
        # the request is provably in flight when SIGTERM comes, and stays so: the engine's gate lets only the
        # first 40 steps through (MOPT_HOLD_AFTER_STEPS), far fewer than its 480 tokens need
        wait_for(lambda: num_running(url) == 1)
        proc.send_signal(signal.SIGTERM)
        wait_for(lambda: httpx.get(url + "/ready", headers=auth, timeout=30).status_code == 503, timeout=120)
        late = {"prompt": "late", "max_tokens": 2}
        refused = httpx.post(url + "/v1/completions", headers=auth, json=late, timeout=30)
        assert refused.status_code == 503 and refused.headers["retry-after"]
        no_pause = httpx.post(url + "/pause", headers=auth, timeout=30)  # a drain lets requests finish
        assert no_pause.status_code == 503 and no_pause.headers["retry-after"], no_pause.text
        assert httpx.get(url + "/health", timeout=30).status_code == 200  # alive while draining
        assert "events" not in out and proc.poll() is None  # the drain waits for the request
        paused(url, auth, False)  # /resume releases the test hook's hold too
        thread.join(120)
        assert out["events"][-1] == "[DONE]"
        finishes = [c["finish_reason"] for e in out["events"][:-1] for c in json.loads(e)["choices"]]
        assert finishes[-1] == "length"  # ran to the end, not aborted
        assert proc.wait(60) == 0
    finally:
        proc.kill()


@pytest.mark.slow
def test_missing_model_folder_is_a_clear_error(tmp_path):
    run = subprocess.run(
        [sys.executable, "-m", "model_optimizer.cli.main", "serve", "--model", str(tmp_path / "nope")],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert run.returncode == 2
    assert "does not exist" in run.stderr and "Traceback" not in run.stderr


@pytest.mark.slow
def test_drain_timeout_aborts_leftovers(tiny_model):
    """The request is provably in flight at SIGTERM (the engine was paused); the drain resumes the engine, but
    4 x 480 tokens cannot be generated within its 0.3 s (the slower the machine, the surer): aborted."""
    proc, url = launch(tiny_model("qwen3"), "--shutdown-timeout", "0.3", "--enable-pause", env={"MOPT_API_KEY": KEY})
    auth = {"Authorization": f"Bearer {KEY}"}
    try:
        out: dict = {}
        body = {"prompt": "too long to drain", "max_tokens": 480, "ignore_eos": True, "stream": True, "n": 4}
        paused(url, auth, True)
        thread = stream_in_thread(url, body, auth, out)
        wait_for(lambda: num_queued(url) >= 1)
        proc.send_signal(signal.SIGTERM)
        thread.join(60)
        assert out["events"][-1] == "[DONE]"
        finishes = {
            c["index"]: c["finish_reason"]
            for e in out["events"][:-1]
            for c in json.loads(e)["choices"]
            if c["finish_reason"]
        }
        assert finishes == {0: "abort", 1: "abort", 2: "abort", 3: "abort"}
        assert proc.wait(30) == 0
    finally:
        proc.kill()


@pytest.mark.slow
def test_engine_fault_fails_requests_then_exits_nonzero(tiny_model):
    """Both a streaming and a plain request are in flight when the engine loop raises: the engine is
    paused until both are queued, and each needs far more than the 40 steps before the fault."""
    proc, url = launch(
        tiny_model("qwen3"), "--enable-pause", env={"MOPT_FAULT_AFTER_STEPS": "40", "MOPT_API_KEY": None}
    )
    try:
        plain: dict = {}
        streamed: dict = {}

        def post(body: dict, out: dict) -> None:
            out["response"] = httpx.post(url + "/v1/completions", timeout=60, json=body)

        paused(url, {}, True)
        threads = [
            threading.Thread(target=post, args=({"prompt": "crash", "max_tokens": 100, "ignore_eos": True}, plain)),
            threading.Thread(
                target=post,
                args=({"prompt": "crash too", "max_tokens": 100, "ignore_eos": True, "stream": True}, streamed),
            ),
        ]
        for thread in threads:
            thread.start()
        wait_for(lambda: num_queued(url) == 2)
        paused(url, {}, False)
        for thread in threads:
            thread.join(60)
        r = streamed["response"]
        events = [line[6:] for line in r.text.split("\n\n") if line.startswith("data: ")]
        assert events[-1] == "[DONE]"
        assert json.loads(events[-2])["error"]["code"] == 500
        error = plain["response"]
        assert error.status_code == 500 and "injected engine fault" in error.json()["error"]["message"]
        assert httpx.get(url + "/health", timeout=30).status_code == 503
        assert httpx.post(url + "/v1/completions", json={"prompt": "x"}, timeout=30).status_code == 503
        assert proc.wait(30) != 0
    finally:
        proc.kill()


@pytest.mark.slow
def test_sigterm_while_paused_resumes_and_drains(tiny_model):
    """A drain of a paused server lets the running request finish instead of waiting the timeout out and
    aborting it."""
    proc, url = launch(tiny_model("qwen3"), "--shutdown-timeout", "120", "--enable-pause", env={"MOPT_API_KEY": KEY})
    auth = {"Authorization": f"Bearer {KEY}"}
    try:
        out: dict = {}
        paused(url, auth, True)
        thread = stream_in_thread(
            url, {"prompt": "paused", "max_tokens": 40, "ignore_eos": True, "stream": True}, auth, out
        )
        wait_for(lambda: num_queued(url) == 1)
        proc.send_signal(signal.SIGTERM)
        thread.join(120)
        assert out["events"][-1] == "[DONE]"
        finishes = [c["finish_reason"] for e in out["events"][:-1] for c in json.loads(e)["choices"]]
        assert finishes[-1] == "length"  # it ran to its end: the drain resumed the engine
        assert proc.wait(60) == 0
    finally:
        proc.kill()
