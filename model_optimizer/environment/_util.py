"""Time-bounded helpers shared by the probes: a thread with a deadline, a subprocess with a
timeout, a file read that never raises. Each returns plain data and records failures."""

from __future__ import annotations

import os
import subprocess
import threading
import time
from collections.abc import Callable
from typing import Any

MAX_OUTPUT_CHARS = 200_000


def call_with_timeout(fn: Callable[[], Any], timeout_s: float) -> dict[str, Any]:
    """Run `fn` in a daemon thread; return {"ok", "data" | "error", "elapsed_s"}.

    A daemon thread, not a pool: a call stuck in the driver must not keep the process alive."""
    box: dict[str, Any] = {}

    def target() -> None:
        try:
            box["data"] = fn()
        except BaseException as exc:  # a probe failure is data, never a crash
            box["error"] = f"{type(exc).__name__}: {exc}"
            box["error_type"] = type(exc).__name__

    start = time.monotonic()
    thread = threading.Thread(target=target, daemon=True, name=f"probe-{getattr(fn, '__name__', 'fn')}")
    thread.start()
    thread.join(timeout_s)
    elapsed = round(time.monotonic() - start, 3)
    if thread.is_alive():
        return {"ok": False, "error": f"timed out after {timeout_s:g} s", "error_type": "Timeout", "elapsed_s": elapsed}
    if "error" in box:
        return {"ok": False, "error": box["error"], "error_type": box["error_type"], "elapsed_s": elapsed}
    return {"ok": True, "data": box.get("data"), "elapsed_s": elapsed}


def run_cmd(argv: list[str], timeout_s: float = 20.0, env: dict[str, str] | None = None) -> dict[str, Any]:
    """Run a command without a shell; never raises. `found` is False when the program is missing."""
    start = time.monotonic()
    try:
        proc = subprocess.run(
            argv, capture_output=True, text=True, timeout=timeout_s, env=env, stdin=subprocess.DEVNULL, errors="replace"
        )
    except FileNotFoundError:
        return {"argv": argv, "found": False}
    except subprocess.TimeoutExpired as exc:
        return {
            "argv": argv,
            "found": True,
            "rc": None,
            "timed_out": True,
            "stdout": _clip(exc.stdout),
            "stderr": _clip(exc.stderr),
        }
    except OSError as exc:
        return {"argv": argv, "found": True, "rc": None, "error": f"{type(exc).__name__}: {exc}"}
    return {
        "argv": argv,
        "found": True,
        "rc": proc.returncode,
        "stdout": _clip(proc.stdout),
        "stderr": _clip(proc.stderr),
        "elapsed_s": round(time.monotonic() - start, 3),
    }


def read_text(path: str, limit: int = MAX_OUTPUT_CHARS) -> str | None:
    """The file's text, or None when it is missing or unreadable."""
    try:
        with open(path, encoding="utf-8", errors="replace") as fh:
            return fh.read(limit)
    except OSError:
        return None


def which(name: str) -> str | None:
    """Like shutil.which, also looking in the sbin folders a normal user's PATH often lacks."""
    import shutil

    extra = os.pathsep.join(["/usr/local/sbin", "/usr/sbin", "/sbin", "/usr/lib/wsl/lib"])
    return shutil.which(name, path=os.environ.get("PATH", "") + os.pathsep + extra)


def _clip(text: Any) -> str:
    if text is None:
        return ""
    if isinstance(text, bytes):
        text = text.decode("utf-8", "replace")
    return text if len(text) <= MAX_OUTPUT_CHARS else text[:MAX_OUTPUT_CHARS] + "\n[clipped]"
