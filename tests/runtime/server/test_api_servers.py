"""`mopt serve --api-server-count 2`: two frontend processes on one port and one engine core; answers as
with one, /metrics summed over both whichever answers, a dead frontend brings the server down (for a
supervisor to restart), SIGTERM drains and leaves no process behind."""

from __future__ import annotations

import concurrent.futures
import os
import signal

import httpx
import pytest

from tests.runtime.server.live import metric
from tests.runtime.server.test_core_process import alive, children
from tests.runtime.server.test_process import launch, wait_for
from tests.runtime.server.test_shutdown_signals import frontends_and_core as listening_frontends_and_core

WAIT = 60.0
BODY = {"prompt": [5, 6, 7, 8], "max_tokens": 8, "temperature": 0.0, "ignore_eos": True}


def frontends_and_core(proc) -> list[int]:
    pids = [p for p in children(proc.pid) if "resource_tracker" not in open(f"/proc/{p}/cmdline").read()]
    assert len(pids) == 2, pids  # the core and one more frontend
    return pids


@pytest.mark.slow
def test_two_frontends_answer_alike_and_sum_their_metrics(tiny_model):
    proc, url = launch(tiny_model("qwen3"), "--api-server-count", "2")
    try:
        pids = frontends_and_core(proc)
        with concurrent.futures.ThreadPoolExecutor(8) as pool:
            answers = list(pool.map(lambda _: httpx.post(url + "/v1/completions", json=BODY, timeout=WAIT), range(24)))
        assert all(a.status_code == 200 for a in answers)
        assert len({a.json()["choices"][0]["text"] for a in answers}) == 1  # greedy: one answer, whoever served it
        for _ in range(5):  # whichever frontend answers the scrape, it counts both frontends' requests
            text = httpx.get(url + "/metrics", timeout=WAIT).text
            finished = [line for line in text.splitlines() if line.startswith("vllm:request_success_total{")]
            assert sum(float(line.rsplit(" ", 1)[1]) for line in finished) >= 24  # every finish reason's series
            assert metric(text, "vllm:prompt_tokens_total") == 24 * len(BODY["prompt"])  # each frontend's, summed
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(WAIT) == 0
        wait_for(lambda: not any(alive(p) for p in pids), WAIT)
    finally:
        proc.kill()


@pytest.mark.slow
def test_a_dead_frontend_brings_the_server_down(tiny_model):
    proc, url = launch(tiny_model("qwen3"), "--api-server-count", "2")
    try:
        [frontend], core = listening_frontends_and_core(proc, url)  # both children run `spawn_main`: by the socket
        os.kill(frontend, signal.SIGKILL)
        assert proc.wait(WAIT) != 0
        wait_for(lambda: not alive(core), WAIT)
    finally:
        proc.kill()
