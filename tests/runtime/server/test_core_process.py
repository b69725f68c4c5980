"""The engine core in its own process (`mopt serve`): the same answers as an in-process core, and faults
that leave nothing behind: a killed core ends every stream with an error and the server exits non-zero,
a killed frontend takes its core with it, a drained server stops its core.

Real processes throughout; each test waits for states (a request queued, a process gone), never for a
time, and every wait is bounded only against a hang."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
from pathlib import Path

import httpx
import pytest

from model_optimizer.runtime.config import EngineConfig
from model_optimizer.runtime.server.config import ServerConfig
from tests.runtime.server.conftest import ENGINE_ARGS
from tests.runtime.server.live import start_server
from tests.runtime.server.test_process import REPO, launch, num_queued, paused, wait_for

WAIT = 60.0


def children(pid: int) -> list[int]:
    """Pids of the live processes whose parent is `pid` (Linux /proc)."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        fields = stat.rsplit(")", 1)[1].split()
        if int(fields[1]) == pid and fields[0] != "Z":
            found.append(int(entry.name))
    return found


def alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


def core_pid(proc) -> int:
    """The engine-core process of a `mopt serve` (its one child that is not multiprocessing's tracker)."""
    pids = [p for p in children(proc.pid) if "resource_tracker" not in Path(f"/proc/{p}/cmdline").read_text()]
    assert len(pids) == 1, pids
    return pids[0]


# ----------------------------------------------------------------------- same answers either way
REQUESTS = [
    {"prompt": [5, 6, 7, 8, 9], "max_tokens": 12, "temperature": 0.0, "logprobs": 3},
    {"prompt": [11, 12, 13], "max_tokens": 10, "temperature": 1.0, "seed": 7, "n": 2, "logprobs": 2},
    {"prompt": "def f(x):", "max_tokens": 16, "temperature": 0.8, "top_p": 0.9, "seed": 3, "stop": ["\n"]},
    {"prompt": [20, 21, 22, 23], "max_tokens": 8, "temperature": 0.0, "ignore_eos": True, "n": 3, "seed": 1},
    # structured outputs: the grammar compiled and its masks filled in the core process
    {
        "prompt": [5, 6, 7],
        "max_tokens": 40,
        "temperature": 0.0,
        "logprobs": 2,
        "guided_json": {
            "type": "object",
            "properties": {"a": {"enum": [1, 22]}, "b": {"type": "boolean"}},
            "required": ["a", "b"],
            "additionalProperties": False,
        },
    },
    {"prompt": "x", "max_tokens": 20, "temperature": 1.0, "seed": 5, "n": 2, "guided_regex": "[a-f]{2,5}-[0-9]{1,3}"},
]


def _stream(url: str, body: dict) -> list[dict]:
    with httpx.stream(
        "POST",
        url + "/v1/completions",
        json={**body, "stream": True, "stream_options": {"include_usage": True}},
        timeout=WAIT,
    ) as r:
        assert r.status_code == 200, r.read()
        data = [line[6:] for line in r.iter_lines() if line.startswith("data: ")]
    assert data[-1] == "[DONE]"
    return [json.loads(d) for d in data[:-1]]


def _summary(chunks: list[dict]) -> dict:
    """What a client gets from a stream, whatever the chunking: per choice its text, token logprobs and
    finish reason, and the usage."""
    choices: dict[int, dict] = {}
    usage = None
    for chunk in chunks:
        usage = chunk.get("usage") or usage
        for c in chunk["choices"]:
            got = choices.setdefault(c["index"], {"text": "", "tokens": [], "logprobs": [], "top": [], "finish": None})
            got["text"] += c["text"]
            if c.get("logprobs"):
                got["tokens"] += c["logprobs"]["tokens"]
                got["logprobs"] += c["logprobs"]["token_logprobs"]
                got["top"] += c["logprobs"]["top_logprobs"]
            got["finish"] = c["finish_reason"] or got["finish"]
    return {"choices": choices, "usage": usage}


@pytest.fixture(scope="module")
def process_server(tiny_model):
    config = ServerConfig(served_model_name="tiny")
    live = start_server(None, config, engine_config=EngineConfig(model=str(tiny_model("qwen3")), **ENGINE_ARGS))
    yield live
    live.stop()


@pytest.mark.slow
def test_a_stream_is_the_same_through_the_process_boundary_and_in_process(server, process_server):
    assert process_server.state.core is not None and server.state.core is None  # one of each
    for body in REQUESTS:
        body = {"model": "tiny", **body}
        in_process = _summary(_stream(server.url, body))
        through = _summary(_stream(process_server.url, body))
        assert through == in_process, body
        assert through["usage"]["completion_tokens"] > 0


@pytest.mark.slow
def test_the_core_process_frees_a_dropped_clients_blocks(process_server):
    url = process_server.url
    body = {"model": "tiny", "prompt": [5, 6, 7], "max_tokens": 60, "ignore_eos": True, "stream": True}
    with httpx.stream("POST", url + "/v1/completions", json=body, timeout=WAIT) as r:
        next(line for line in r.iter_lines() if line.startswith("data: "))  # it runs: then the client leaves
    engine = process_server.state.engine
    wait_for(lambda: engine.stats.num_running == 0 and engine.stats.num_free_blocks == engine.stats.num_blocks, WAIT)
    assert engine.num_in_flight == 0


# ----------------------------------------------------------------------- faults, real processes
@pytest.mark.slow
def test_kill_9_of_the_core_ends_every_stream_with_an_error_and_the_server_exits(tiny_model):
    proc, url = launch(tiny_model("qwen3"), "--enable-pause")
    try:
        core = core_pid(proc)
        out: dict = {}

        def read() -> None:
            body = {"prompt": "never finished", "max_tokens": 400, "ignore_eos": True, "stream": True}
            with httpx.stream("POST", url + "/v1/completions", json=body, timeout=WAIT) as r:
                out["events"] = [line[6:] for line in r.iter_lines() if line.startswith("data: ")]

        paused(url, {}, True)  # provably in flight when the core dies
        thread = threading.Thread(target=read)
        thread.start()
        wait_for(lambda: num_queued(url) == 1)
        os.kill(core, signal.SIGKILL)
        thread.join(WAIT)
        events = out["events"]
        assert events[-1] == "[DONE]" and json.loads(events[-2])["error"]["code"] == 500
        assert "engine core process exited" in json.loads(events[-2])["error"]["message"]
        assert proc.wait(WAIT) != 0  # a supervisor restarts it
    finally:
        proc.kill()


@pytest.mark.slow
def test_kill_9_of_the_frontend_leaves_no_core_behind(tiny_model):
    proc, url = launch(tiny_model("qwen3"))
    try:
        core = core_pid(proc)
        assert (
            httpx.post(url + "/v1/completions", json={"prompt": [1, 2], "max_tokens": 2}, timeout=WAIT).status_code
            == 200
        )
        proc.kill()
        proc.wait(WAIT)
        wait_for(lambda: not alive(core), WAIT)  # it watches its parent
    finally:
        proc.kill()


@pytest.mark.slow
def test_sigterm_drains_then_stops_the_core(tiny_model):
    proc, url = launch(tiny_model("qwen3"))
    try:
        core = core_pid(proc)
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(WAIT) == 0
        wait_for(lambda: not alive(core), WAIT)
    finally:
        proc.kill()


@pytest.mark.slow
def test_a_program_that_never_stops_its_core_still_exits_and_takes_the_core_along(tiny_model):
    """The core ignores SIGINT (and a first SIGTERM) and is no daemon: without the exit hook,
    multiprocessing would wait for it at interpreter exit forever."""
    probe = (
        "import os\nfrom model_optimizer.runtime.config import EngineConfig\n"
        "from model_optimizer.runtime.core_process import start_core\n"
        f"handle = start_core(EngineConfig(model={str(tiny_model('qwen3'))!r}, **{ENGINE_ARGS!r}))\n"
        "print(handle.pid, handle.tmpdir, flush=True)"
    )
    proc = subprocess.Popen([sys.executable, "-c", probe], cwd=REPO, stdout=subprocess.PIPE, text=True)
    try:
        pid, tmpdir = proc.stdout.readline().split()  # the core is up
        assert proc.wait(WAIT) == 0  # only a bound on a hang
        assert not alive(int(pid)) and not Path(tmpdir).exists()
    finally:
        proc.kill()
