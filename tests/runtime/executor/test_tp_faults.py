"""Tensor-parallel start-up and faults: clear errors, no hang, and no worker outliving its driver.

A worker process holds GPU memory on a real machine, so each path that ends a driver (close, an
exception, SIGTERM, kill -9) or a worker (killed mid-run) is followed here by its worker pids until
they are gone; the waits only bound a hang, the assertions are on process state and error text.
"""

from __future__ import annotations

import multiprocessing
import os
import signal
import subprocess
import sys
import textwrap

import httpx
import pytest

from model_optimizer import LLM, SamplingParams
from model_optimizer.runtime.config import EngineConfig
from tests.runtime.executor.processes import alive, spawned_children, wait_gone
from tests.runtime.server.test_group_signals import kill_group, launch_in_own_group
from tests.runtime.server.test_process import REPO, launch, wait_for

SMALL = dict(dtype="float32", max_model_len=128, num_kv_blocks=16)


def test_sizes_that_cannot_split_are_refused_before_any_worker_starts(tiny_model):
    with pytest.raises(ValueError, match="tensor_parallel_size must be a positive integer"):
        EngineConfig(tensor_parallel_size=0)
    with pytest.raises(ValueError, match="num_attention_heads of 4 does not divide by tensor_parallel_size 3"):
        LLM(str(tiny_model("qwen3")), tensor_parallel_size=3, **SMALL)
    assert multiprocessing.active_children() == []


@pytest.mark.slow
def test_a_worker_failing_at_start_up_is_raised_in_the_driver(tiny_model):
    """The ValueError happens inside the workers (the checkpoint's length limit); the driver raises it."""
    with pytest.raises(ValueError, match="max_model_len 100000 exceeds"):
        LLM(str(tiny_model("qwen3")), tensor_parallel_size=2, dtype="float32", max_model_len=100000)
    assert multiprocessing.active_children() == []


@pytest.mark.slow
def test_worker_killed_mid_run_fails_the_generate_and_reaps_the_other(tiny_model):
    llm = LLM(str(tiny_model("qwen3")), tensor_parallel_size=2, **SMALL)
    pids = llm.runner.worker_pids
    killed = []

    def kill_rank_1(index: int, _output) -> None:
        if not killed:  # the first prompt is done, the second still has tokens to go
            os.kill(pids[1], signal.SIGKILL)
            killed.append(index)

    short = SamplingParams(max_tokens=2, temperature=0.0, ignore_eos=True)
    long = SamplingParams(max_tokens=100, temperature=0.0, ignore_eos=True)
    with pytest.raises(RuntimeError, match=r"worker rank 1 died \(exit code -9\)"):
        llm.generate(["short", "long"], [short, long], on_progress=kill_rank_1)
    assert killed == [0]
    assert not wait_gone(pids)
    with pytest.raises(RuntimeError, match="workers are stopped"):  # later calls fail at once
        llm.generate(["again"], short)
    assert not llm.engine.has_unfinished_requests()  # generate aborted what it had added


DRIVER = """
import os, sys, time
from model_optimizer import LLM

if __name__ == "__main__":
    llm = LLM(sys.argv[1], tensor_parallel_size=2, dtype="float32", max_model_len=128, num_kv_blocks=16)
    llm.generate([[1, 2, 3]])
    print(" ".join(map(str, llm.runner.worker_pids)), flush=True)
    time.sleep(600)
"""


@pytest.mark.slow
@pytest.mark.parametrize("sig", [signal.SIGKILL, signal.SIGTERM])
def test_workers_leave_when_their_driver_dies(tiny_model, tmp_path, sig):
    script = tmp_path / "driver.py"
    script.write_text(textwrap.dedent(DRIVER))
    driver = subprocess.Popen(
        [sys.executable, str(script), str(tiny_model("qwen3"))],
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    try:
        line = driver.stdout.readline()
        pids = [int(p) for p in line.split()]
        assert len(pids) == 2 and alive(pids) == pids, line
        driver.send_signal(sig)
        assert driver.wait(60) == -sig
        assert not wait_gone(pids)
    finally:
        driver.kill()
        driver.wait()


@pytest.mark.slow
def test_serve_tp2_answers_then_a_dead_worker_makes_it_unhealthy_and_exit(tiny_model):
    """The worker dies while the server is idle: no request has to fail before /health says so."""
    proc, url = launch(tiny_model("qwen3"), "--tensor-parallel-size", "2", "--dtype", "float32")
    try:
        (core,) = spawned_children(proc.pid)  # the engine-core process
        pids = spawned_children(core)  # its tensor-parallel workers
        assert len(pids) == 2
        body = {"prompt": "def fibonacci(n):", "max_tokens": 8, "temperature": 0.0, "ignore_eos": True}
        r = httpx.post(url + "/v1/completions", json=body, timeout=60)
        assert r.status_code == 200 and r.json()["usage"]["completion_tokens"] == 8, r.text
        assert httpx.get(url + "/health").status_code == 200
        os.kill(pids[1], signal.SIGKILL)
        wait_for(lambda: httpx.get(url + "/health").status_code == 503)
        refused = httpx.post(url + "/v1/completions", json=body, timeout=60)
        assert refused.status_code == 503, refused.text
        assert proc.wait(60) != 0
        assert not wait_gone(pids)
        assert "worker rank 1 died" in proc.stdout.read()
    finally:
        proc.kill()
        proc.wait()


@pytest.mark.slow
def test_serve_tp2_sigterm_exits_cleanly_and_stops_its_workers(tiny_model):
    """SIGTERM drains the server and exits normally: the exit code is 0 (no hang joining the live
    workers at interpreter exit) and the workers are gone."""
    proc, url = launch(tiny_model("qwen3"), "--tensor-parallel-size", "2", "--dtype", "float32")
    try:
        (core,) = spawned_children(proc.pid)  # the engine-core process
        pids = spawned_children(core)  # its tensor-parallel workers
        assert len(pids) == 2
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(60) == 0
        assert not wait_gone([core, *pids])
    finally:
        proc.kill()
        proc.wait()


@pytest.mark.slow
def test_serve_tp2_group_sigterm_drains_with_its_workers_alive_until_told(tiny_model):
    """A service manager's stop signals the whole group, workers included: they leave it to the driver, so
    the drain ends with exit 0 (not a dead worker's failure) and every process is gone."""
    proc, url = launch_in_own_group(tiny_model("qwen3"), "--tensor-parallel-size", "2", "--dtype", "float32")
    try:
        (core,) = spawned_children(proc.pid)
        pids = spawned_children(core)
        assert len(pids) == 2
        os.killpg(proc.pid, signal.SIGTERM)
        assert proc.wait(60) == 0, proc.stdout.read()
        assert "died" not in proc.stdout.read()
        assert not wait_gone([core, *pids])
    finally:
        kill_group(proc)
