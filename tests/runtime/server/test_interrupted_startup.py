"""Ctrl-C at any point of `mopt serve`'s start-up: exit code 130 and no engine core left behind.

The core is spawned early (cli/serve.py) and loads while the frontend sets up its HTTP side; a
KeyboardInterrupt can land before the frontend holds the core in anything that stops it (inside
spawn_core, between spawn_core's return and the caller's assignment, while it waits for "ready",
just after it). Each case injects the interrupt at that exact point in a real `mopt serve` process
(PROBE patches the named function to raise KeyboardInterrupt there), so the race a tester hit one
time in seven is hit every time. And the core itself: SIGTERM ends it while it loads, and once it
serves, it ignores SIGTERM and SIGINT (its frontend stops it; test_group_signals.py has the whole server).
States asserted; the timeouts only bound a hang."""

from __future__ import annotations

import logging
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from model_optimizer.runtime.config import EngineConfig
from model_optimizer.runtime.core_process import CoreStartupError, _sigint_held, spawn_core
from tests.runtime.server.conftest import ENGINE_ARGS
from tests.runtime.server.test_core_process import alive
from tests.runtime.server.test_process import REPO

pytestmark = pytest.mark.slow
WAIT = 120.0  # seconds; only a bound on a hang

PROBE = r"""
import multiprocessing.process, sys
from model_optimizer.runtime import core_process

where, pidfile, argv = sys.argv[1], sys.argv[2], sys.argv[3:]


def after(owner, name, point):  # owner.name, then a Ctrl-C right after it returns (at `point`)
    original = getattr(owner, name)

    def patched(*args, **kwargs):
        result = original(*args, **kwargs)
        if getattr(args[0], "name", "mopt-engine-core") == "mopt-engine-core":
            if name == "start":
                open(pidfile, "w").write(str(args[0].pid))
            if where == point:
                raise KeyboardInterrupt
        return result

    setattr(owner, name, patched)


after(multiprocessing.process.BaseProcess, "start", "spawned")  # inside spawn_core, before it returns
after(core_process, "spawn_core", "returned")  # before cli/serve.py holds the CoreStart
after(core_process, "_wait_ready", "reported")  # the core is ready, the handle not yet handed over
after(core_process.CoreStart, "ready", "taken")  # handed over, the server not yet up
if where == "loading":  # while the frontend waits for a core still loading

    def waiting(conn, process):
        raise KeyboardInterrupt

    core_process._wait_ready = waiting
from model_optimizer.cli.main import main

sys.exit(main(["serve", *argv]))
"""


@pytest.mark.parametrize("where", ["spawned", "returned", "loading", "reported", "taken"])
def test_ctrl_c_anywhere_in_start_up_exits_130_and_leaves_no_core(tiny_model, tmp_path, where):
    pidfile = tmp_path / "core.pid"
    args = ["--model", str(tiny_model("qwen3")), "--port", "0", "--max-model-len", "128", "--num-kv-blocks", "64"]
    scratch = tempfile.mkdtemp(prefix="mopt-int-")  # the core's socket folder: short, for ipc:// paths
    proc = subprocess.Popen(
        [sys.executable, "-c", PROBE, where, str(pidfile), *args],
        cwd=REPO,
        env={**os.environ, "TMPDIR": scratch},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        _, err = proc.communicate(timeout=WAIT)  # the old code waited for the core at exit forever
        left = os.listdir(scratch)
    finally:
        proc.kill()
        shutil.rmtree(scratch, ignore_errors=True)
    assert proc.returncode == 130, err
    assert "mopt serve: interrupted" in err and "Uvicorn running" not in err, err
    core = int(pidfile.read_text())
    deadline = time.monotonic() + WAIT
    while alive(core) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not alive(core), err
    assert not [name for name in left if name.startswith("mopt-core-")], left  # its socket folder removed


def test_a_ctrl_c_while_the_core_is_spawned_waits_until_the_spawn_is_done():
    """process.start() runs whole or not at all: half done, no one would know of the core it made."""
    done = []
    with pytest.raises(KeyboardInterrupt):
        with _sigint_held():
            signal.raise_signal(signal.SIGINT)
            for _ in range(1000):  # where Python would run an unheld handler
                pass
            done.append(True)
    assert done == [True]
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler


def _ignored(pid: int) -> set[int]:
    """The signals process `pid` ignores (/proc's SigIgn mask)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("SigIgn:"):
            mask = int(line.split()[1], 16)
            return {sig for sig in range(1, 64) if mask >> (sig - 1) & 1}
    return set()


def _wait(condition, what: str) -> None:  # noqa: ANN001
    deadline = time.monotonic() + WAIT
    while not condition():
        assert time.monotonic() < deadline, what
        time.sleep(0.02)


def test_sigterm_ends_a_core_that_is_still_loading(tiny_model):
    start = spawn_core(EngineConfig(model=str(tiny_model("qwen3")), **ENGINE_ARGS))
    pid = start.handle.pid
    _wait(lambda: signal.SIGINT in _ignored(pid), "the core never reached run_core")  # its first line
    assert signal.SIGTERM not in _ignored(pid)
    os.kill(pid, signal.SIGTERM)
    with pytest.raises(CoreStartupError, match="exited during start-up"):
        start.ready()
    assert not start.handle.process.is_alive() and not Path(start.handle.tmpdir).exists()


def test_a_serving_core_leaves_every_sigterm_and_sigint_to_its_frontend(tiny_model):
    handle = spawn_core(EngineConfig(model=str(tiny_model("qwen3")), **ENGINE_ARGS), log_level=logging.INFO).ready()
    try:
        assert {signal.SIGINT, signal.SIGTERM} <= _ignored(handle.pid)  # set before it reported ready
        for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGTERM, signal.SIGINT):  # a group's, again and again
            os.kill(handle.pid, sig)
        assert handle.process.is_alive()
        handle.stop()  # what its frontend does: SHUTDOWN
        assert handle.process.exitcode == 0
    finally:
        handle.stop()
