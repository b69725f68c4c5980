"""Runs that end before their plan: SIGINT / SIGTERM save the run so far, and open loops that a
--max-concurrency cap or --duration holds back say so (arrival times kept, queue wait recorded).

The signal tests run `mopt bench` as a child process against the real streaming server of conftest,
whose valve holds answers, so what is in flight when the signal comes is what the test let through.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from model_optimizer.cli.main import main
from model_optimizer.optimizer.bench.report import load_runs

REPO = Path(__file__).resolve().parents[3]


def argv(server, out, *flags) -> list[str]:
    base = ["bench", "--base-url", server.base_url, "--output-dir", str(out), "--no-progress"]
    return [*base, "--prompt-len", "8", "--output-len", "4", *flags]


def start_bench(server, out, *flags) -> subprocess.Popen:
    cmd = [sys.executable, "-m", "model_optimizer.cli.main", *argv(server, out, *flags)]
    return subprocess.Popen(
        cmd, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True
    )


def summary_rows(out: Path) -> list[str]:
    """The visible text of each run's row in report.html's summary table."""
    page = (out / "report.html").read_text()
    section = re.search(r"<section id='summary'>(.*?)</section>", page, re.S).group(1)
    rows = re.findall(r"<tr>(.*?)</tr>", section, re.S)[1:]  # the header row first
    return [" ".join(re.sub(r"<[^>]+>", " ", row).split()) for row in rows]


def wait_idle(valve) -> None:
    valve.open()
    deadline = time.monotonic() + 60  # a bound on a hang
    while valve.in_flight and time.monotonic() < deadline:
        time.sleep(0.05)


def test_sigint_saves_the_run_in_progress(server, valve, tmp_path):
    with valve.held():
        valve.release(3)  # three answers go through; the next two stay in flight
        proc = start_bench(server, tmp_path, "--concurrency", "2", "--num-requests", "50")
        valve.wait_arrivals(5)
        os.kill(proc.pid, signal.SIGINT)
        out, err = proc.communicate(timeout=60)
    wait_idle(valve)
    assert proc.returncode == 130, (out, err)
    assert "interrupted (SIGINT)" in out and "Traceback" not in err
    [run] = load_runs(tmp_path)
    assert run["interrupted"] is True and run["stop_reason"] == "SIGINT"
    s = run["summary"]
    assert (s["num_requests"], s["num_ok"], s["errors"]) == (5, 3, {"cancelled": 2})
    assert "stopped early: SIGINT" in " ".join(out.split())
    assert (tmp_path / "summary.csv").read_text().splitlines()[1].endswith(",True")  # the interrupted column
    assert (tmp_path / "report.html").exists() and not list(tmp_path.glob(".*tmp"))
    [row] = summary_rows(tmp_path)
    assert row.startswith("#01 concurrency 2 interrupted after 5 of 50 requests (SIGINT) 3 / 5 "), row


def test_sigterm_stops_an_open_loop_and_counts_what_it_never_sent(server, valve, tmp_path):
    flags = ("--request-rate", "1000", "--load-mode", "constant", "--num-requests", "50", "--max-concurrency", "2")
    with valve.held():
        proc = start_bench(server, tmp_path, *flags)
        valve.wait_arrivals(2)
        os.kill(proc.pid, signal.SIGTERM)
        out, err = proc.communicate(timeout=60)
    wait_idle(valve)
    assert proc.returncode == 143, (out, err)
    assert len(valve.arrivals) == 2  # nothing was sent after the signal
    [run] = load_runs(tmp_path)
    assert run["stop_reason"] == "SIGTERM" and run["summary"]["errors"] == {"cancelled": 2}
    schedule = run["summary"]["schedule"]
    assert schedule["num_unsent"] == 48 and schedule["behind"] is False  # stopped, not behind
    [row] = summary_rows(tmp_path)  # of the whole schedule: the 2 sent and the 48 never sent
    assert "interrupted after 2 of 50 requests (SIGTERM)" in row, row


def test_a_signal_between_sweep_runs_keeps_the_finished_ones(server, valve, tmp_path):
    flags = ("--load-mode", "sweep", "--num-requests", "2", "--sweep-max-concurrency", "2", "--sweep-num-rates", "1")
    with valve.held():
        valve.release(2)  # the one-at-a-time run finishes; the saturation run is held
        proc = start_bench(server, tmp_path, *flags)
        valve.wait_arrivals(4)
        os.kill(proc.pid, signal.SIGINT)
        out, err = proc.communicate(timeout=60)
    wait_idle(valve)
    assert proc.returncode == 130, (out, err)
    runs = load_runs(tmp_path)
    assert [r["interrupted"] for r in runs] == [False, True]  # no rate run started after the signal
    assert runs[0]["summary"]["num_ok"] == 2 and runs[1]["summary"]["errors"] == {"cancelled": 2}
    complete, partial = summary_rows(tmp_path)  # only the run that stopped early says so
    assert "interrupted" not in complete and complete.startswith("#01 sweep: one at a time 2 / 2 "), complete
    assert "interrupted after 2 of 2 requests (SIGINT) 0 / 2 " in partial, partial


class BenchThread:
    """`mopt bench` in a thread of this process, so the test steers the valve meanwhile."""

    def __init__(self, server, out, *flags) -> None:
        self.code: int | None = None
        self.thread = threading.Thread(target=self._run, args=(argv(server, out, *flags),), daemon=True)
        self.thread.start()

    def _run(self, args: list[str]) -> None:
        self.code = main(args)

    def join(self) -> int | None:
        self.thread.join(120)
        assert not self.thread.is_alive(), "mopt bench did not end"
        return self.code


def test_a_capped_open_loop_keeps_arrival_times_and_records_queue_wait(server, valve, tmp_path, capsys):
    flags = ("--request-rate", "100", "--load-mode", "constant", "--num-requests", "6", "--max-concurrency", "1")
    with valve.held():
        bench = BenchThread(server, tmp_path, *flags)
        valve.wait_arrivals(1)
        time.sleep(0.2)  # every later arrival (due by 0.05 s) now waits for the one slot
        for arrived in range(1, 6):
            valve.release(1)
            valve.wait_arrivals(arrived + 1)
    assert bench.join() == 0
    assert valve.max_in_flight == 1
    [run] = load_runs(tmp_path)
    requests = run["requests"]
    assert [r["scheduled"] for r in requests] == pytest.approx([i / 100 for i in range(6)], abs=1e-6)
    assert all(r["queue_wait"] > 0 for r in requests[1:])  # held by the cap, each after its arrival time
    assert all(r["send"] >= r["scheduled"] + r["queue_wait"] - 1e-3 for r in requests)
    assert run["summary"]["schedule"]["behind"] is True
    assert "fell behind its schedule" in " ".join(capsys.readouterr().out.split())


def test_duration_stops_sending_by_the_clock(server, valve, tmp_path):
    flags = ("--request-rate", "100", "--load-mode", "constant", "--duration", "0.3", "--max-concurrency", "1")
    with valve.held():
        bench = BenchThread(server, tmp_path, *flags)
        valve.wait_arrivals(1)
        time.sleep(0.6)  # past the duration while the only slot is taken
    assert bench.join() == 0
    assert len(valve.arrivals) == 1  # the queued arrivals were never sent after the duration
    [run] = load_runs(tmp_path)
    schedule = run["summary"]["schedule"]
    assert run["summary"]["num_requests"] == 1 and schedule["num_unsent"] >= 28 and schedule["behind"] is True
