"""Helpers for tune tests that run `mopt tune` against fake_openai_server.py: the argv, a tuner process
stopped at an event (a trial's server started), and whether a process still runs."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import optuna

from model_optimizer.optimizer.tune.study import STUDY_NAME

REPO = Path(__file__).resolve().parents[3]
FAKE_SERVER = Path(__file__).with_name("fake_openai_server.py")
LOAD = ["--num-requests", "2", "--prompt-len", "4", "--output-len", "2", "--num-warmups", "0", "--no-predict"]
EVENT_TIMEOUT_S = 120.0
"""A bound on waiting for an event (a file written by another process), not a speed."""


def server_cmd(*extra: str) -> str:
    return f"{{python}} {FAKE_SERVER} --port {{port}} --model {{model}} {{flags}} " + " ".join(extra)


def tune_argv(out: Path, space: Path, *extra: str, cmd: str | None = None) -> list[str]:
    """`mopt tune` (without the leading `mopt`) over `space` with the fake server."""
    argv = ["tune", "--output-dir", str(out), "--space", str(space), "--server-cmd", cmd or server_cmd()]
    return [*argv, "--model", "fake", *LOAD, *extra]


def space_file(folder: Path, text: str = "max_num_seqs: [1, 2, 4]\n") -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "space.yaml"
    path.write_text(text)
    return path


def start_tune(argv: list[str], prefix: tuple[str, ...] = (), **kwargs) -> subprocess.Popen:
    """`mopt tune` as a process (after `prefix`, a command that runs it), its output in one pipe."""
    return subprocess.Popen(
        [*prefix, sys.executable, "-m", "model_optimizer.cli.main", *argv],
        cwd=kwargs.pop("cwd", REPO),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        **kwargs,
    )


def wait_held(hold: Path, proc: subprocess.Popen) -> int:
    """The pid of the server holding a request at `hold` (the trial is in its load), once it is; the
    tuner `proc` must not end meanwhile."""
    reached = hold.with_name(hold.name + ".reached")
    deadline = time.monotonic() + EVENT_TIMEOUT_S
    while time.monotonic() < deadline:
        assert proc.poll() is None, proc.stdout.read()
        if reached.is_file():
            return int(reached.read_text())  # written whole (a rename)
        time.sleep(0.05)
    raise AssertionError(f"no server held a request at {hold}")


def running(pid: int) -> bool:
    """Alive and not a zombie (a killed orphan may wait a moment for init to reap it)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:
        with open(f"/proc/{pid}/status") as status:
            return not any(line.startswith("State:") and line.split()[1] == "Z" for line in status)
    except OSError:
        return False


def wait_gone(pid: int) -> bool:
    """Whether `pid` ends within the event bound (a signal's delivery is not instant on a loaded machine)."""
    deadline = time.monotonic() + EVENT_TIMEOUT_S
    while running(pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    return not running(pid)


def kill_fake_server(pid: int) -> None:
    """Clean-up: SIGKILL the group of a fake server a failed assertion may have left, if `pid` still is one."""
    try:
        if FAKE_SERVER.name.encode() not in Path(f"/proc/{pid}/cmdline").read_bytes():
            return  # gone, and the pid perhaps another process's since
        os.killpg(pid, signal.SIGKILL)
    except (OSError, ProcessLookupError):
        pass


def trials(out: Path) -> list:
    return optuna.load_study(study_name=STUDY_NAME, storage=f"sqlite:///{out / 'study.db'}").trials
