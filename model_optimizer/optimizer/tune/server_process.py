"""One trial's server as a child process: started in its own process group, timed to ready, always reaped.

The server runs in a new session, so stopping it stops everything it started (a shell, a launcher, an
engine's workers): SIGTERM to the group, then SIGKILL to the group if it lingers. `ServerProcess` is a
context manager, so a crash, a timeout and Ctrl-C all leave through the same reaping code.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import time
from pathlib import Path

import httpx

STOP_GRACE_S = 10.0
"""Seconds the group gets to exit after SIGTERM before SIGKILL."""
POLL_S = 0.2


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
        return self

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


def _signal_group(pgid: int, sig: int) -> None:
    try:
        os.killpg(pgid, sig)
    except (ProcessLookupError, PermissionError):
        pass  # the group is gone already
