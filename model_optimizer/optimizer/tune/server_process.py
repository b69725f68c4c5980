"""One trial's server as a child process: started in its own process group, timed to ready, always reaped.

The server runs in a new session, so stopping it stops everything it started (a shell, a launcher, an
engine's workers): SIGTERM to the group, then SIGKILL to the group if it lingers. `ServerProcess` is a
context manager, so a crash, a timeout and Ctrl-C all leave through the same reaping code; a signal that
arrives while the server is being stopped waits until it is (a second Ctrl-C cannot skip the SIGKILL).

A tuner killed outright (SIGKILL, a crash) runs no reaping code, and its server, in a session of its own,
goes on running. So each launch is recorded in `server.json` (pid and the kernel's start time of the
process), and `stop_leftover` stops that server later, on `--resume`, once it has checked that the pid
still names the process started then: a pid is reused, a pid and a start time are not.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx

STOP_GRACE_S = 10.0
"""Seconds the group gets to exit after SIGTERM before SIGKILL."""
POLL_S = 0.2
RECORD_NAME = "server.json"
"""The launch record beside the server's log: {"pid", "start_time", "argv"}."""
STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


class ServerFailed(RuntimeError):
    """The server exited, or never became ready; the message carries the end of its log."""


def free_port() -> int:
    """A TCP port the OS says is free now (the server binds it moments later)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class ServerProcess:
    """A server command run until `stop`, its output in `log_path`."""

    def __init__(
        self, argv: list[str], log_path: Path, env: dict[str, str] | None = None, cwd: Path | None = None
    ) -> None:
        self.argv, self.log_path, self.cwd = argv, Path(log_path), cwd
        self.env = {**os.environ, **(env or {})}
        self.proc: subprocess.Popen | None = None
        self.started_at = 0.0

    def __enter__(self) -> ServerProcess:
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        self._log = open(self.log_path, "wb")  # noqa: SIM115  # closed in stop()
        self.started_at = time.monotonic()
        try:  # a stop signal between the launch and the record waits for both: raised inside __enter__, it
            with signals_held():  # would skip __exit__ and leave an unrecorded server running
                self._launch()
        except BaseException:
            if self.proc is not None:
                self.stop()
            raise
        return self

    def _launch(self) -> None:
        try:
            self.proc = subprocess.Popen(
                self.argv,
                stdout=self._log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                env=self.env,
                cwd=self.cwd,
                start_new_session=True,
            )
        except OSError as exc:
            self._log.close()
            raise ServerFailed(f"cannot start {self.argv[0]!r}: {exc}") from None
        (self.log_path.parent / "server.pid").write_text(f"{self.proc.pid}\n")  # to check it was reaped
        record = {"pid": self.proc.pid, "start_time": process_start_time(self.proc.pid), "argv": self.argv}
        (self.log_path.parent / RECORD_NAME).write_text(json.dumps(record) + "\n")  # for stop_leftover

    def __exit__(self, *exc) -> None:
        self.stop()

    def wait_ready(self, url: str, timeout: float) -> float:
        """Seconds from process start until `url` answers 200; ServerFailed if it exits or times out."""
        assert self.proc is not None, "enter the context first"
        deadline = self.started_at + timeout
        with httpx.Client(timeout=5.0) as client:
            while time.monotonic() < deadline:
                if self.proc.poll() is not None:
                    raise ServerFailed(
                        f"server exited with code {self.proc.returncode} before ready: {self.log_tail()}"
                    )
                try:
                    if client.get(url).status_code == 200:
                        return time.monotonic() - self.started_at
                except httpx.HTTPError:
                    pass  # not listening yet
                time.sleep(POLL_S)
        raise ServerFailed(f"server not ready at {url} within {timeout:g} s: {self.log_tail()}")

    def peak_rss_bytes(self) -> int | None:
        """Sum of the peak resident memory (VmHWM) of the processes in the server's group, from /proc."""
        if self.proc is None or not Path("/proc").is_dir():
            return None
        total, found = 0, False
        for entry in Path("/proc").iterdir():
            if not entry.name.isdigit():
                continue
            try:
                if os.getpgid(int(entry.name)) != self.proc.pid:
                    continue
                for line in (entry / "status").read_text().splitlines():
                    if line.startswith("VmHWM:"):
                        total += int(line.split()[1]) * 1024
                        found = True
            except (OSError, ValueError):
                continue  # exited meanwhile, or not ours to read
        return total if found else None

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def stop(self) -> int | None:
        """Stop the whole process group (SIGTERM, then SIGKILL) and return the server's exit code."""
        if self.proc is None:
            return None
        with signals_held():  # a second Ctrl-C during the grace would leave a server that ignores SIGTERM
            try:
                _signal_group(self.proc.pid, signal.SIGTERM)
                try:
                    self.proc.wait(STOP_GRACE_S)
                except subprocess.TimeoutExpired:
                    pass
                _signal_group(self.proc.pid, signal.SIGKILL)  # stragglers of the group, even if the leader left
                self.proc.wait()
            finally:
                self._log.close()
        return self.proc.returncode

    def log_tail(self, num_chars: int = 2000) -> str:
        if not self._log.closed:
            self._log.flush()
        try:
            text = self.log_path.read_bytes()[-num_chars:].decode(errors="replace")
        except OSError:
            return ""
        return " ".join(text.split())


@contextmanager
def signals_held() -> Iterator[None]:
    """SIGINT, SIGTERM and SIGHUP noted instead of handled for the block, then raised again once it ends,
    to whatever handlers were there (the main thread only: elsewhere the block runs as it is)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    arrived: list[int] = []
    previous = {}
    for sig in STOP_SIGNALS:
        handler = signal.getsignal(sig)
        if handler is not None:  # None: a handler set outside Python, which could not be put back
            previous[sig] = signal.signal(sig, lambda signum, frame: arrived.append(signum))
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        for sig in dict.fromkeys(arrived):
            signal.raise_signal(sig)


def process_start_time(pid: int) -> int | None:
    """When `pid` started, in clock ticks after boot (field 22 of /proc/PID/stat); None when no such
    process is readable (gone, or no /proc)."""
    fields = _stat_fields(Path(f"/proc/{pid}"))
    return None if fields is None else int(fields[19])  # fields from the third on: the 22nd is at 19


def _stat_fields(proc_dir: Path) -> list[str] | None:
    """The fields of a process's /proc stat from the third on (state, parent, group, ...), or None when it
    cannot be read (gone, or no /proc)."""
    try:
        stat = (proc_dir / "stat").read_text()
    except OSError:
        return None
    return stat[stat.rindex(")") + 2 :].split()  # after the command name, which may hold spaces


def stop_leftover(trial_dir: Path) -> bool:
    """Stop the server recorded in `trial_dir/server.json` if it still runs: SIGTERM to its process group,
    SIGKILL after the grace. Only a process whose pid and start time both match the record is signalled,
    so a pid the system has since given to another process is left alone, and so is a group whose
    leader has exited (its pid can no longer be checked). True when a server was stopped."""
    try:
        record = json.loads((trial_dir / RECORD_NAME).read_text())
        pid, started = int(record["pid"]), int(record["start_time"])
    except (OSError, ValueError, TypeError, KeyError):  # no record, or one written without /proc
        return False
    if process_start_time(pid) != started:
        return False
    with signals_held():
        _signal_group(pid, signal.SIGTERM)
        deadline = time.monotonic() + STOP_GRACE_S
        while _group_alive(pid) and time.monotonic() < deadline:
            time.sleep(POLL_S)
        if _group_alive(pid):  # a live member keeps the group's id from being given to another process
            _signal_group(pid, signal.SIGKILL)  # not our child: init reaps it
    return True


def _group_alive(pgid: int) -> bool:
    """Whether a process of group `pgid` is still running (not a zombie), from /proc."""
    for entry in Path("/proc").iterdir():
        fields = _stat_fields(entry) if entry.name.isdigit() else None
        if fields is not None and int(fields[2]) == pgid and fields[0] != "Z":  # state, process group
            return True
    return False


def _signal_group(pgid: int, sig: int) -> None:
    try:
        os.killpg(pgid, sig)
    except (ProcessLookupError, PermissionError):
        pass  # the group is gone already
