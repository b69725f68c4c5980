"""`mopt bench --num-workers N` against the real streaming server: the same requests as one process,
one shared concurrency and schedule, and a dead worker or Ctrl-C ending the run cleanly.

Runs in this process start real spawned workers; the fault tests run `mopt bench` as a child in a
session of its own, so every process it started (workers, multiprocessing's resource tracker) is
in its process group and the test can see that none is left.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from model_optimizer.cli.main import main
from model_optimizer.optimizer.bench.report import load_run, load_runs
from tests.optimizer.bench.util import EARLY, step_through

pytestmark = pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="reads processes from /proc")

REPO = Path(__file__).resolve().parents[3]


def argv(server, out, *flags) -> list[str]:
    base = ["bench", "--base-url", server.base_url, "--output-dir", str(out), "--no-progress"]
    prompt_len = [] if "--dataset" in flags else ["--prompt-len", "8"]  # a file's prompts have their own lengths
    return base + [*prompt_len, "--output-len", "4", *flags]


def run(server, out, *flags) -> tuple[dict, list]:
    """One `mopt bench` invocation here; its run and the prompts the server received, sorted."""
    server.app.state.prompts.clear()
    assert main(argv(server, out, *flags)) == 0
    [result] = load_runs(out)
    return result, sorted(map(str, server.app.state.prompts))


def requests_of(result: dict, *keys: str) -> list[tuple]:
    return [tuple(r[k] for k in keys) for r in result["requests"]]


SAME = ("index", "prompt_len", "output_len_requested", "output_tokens", "prompt_tokens", "error")
SUMMED = ("num_requests", "num_ok", "num_failed", "prompt_tokens", "output_tokens", "errors")


def assert_same_requests(one: tuple[dict, list], two: tuple[dict, list]) -> None:
    (a, prompts_a), (b, prompts_b) = one, two
    assert prompts_a == prompts_b and len(prompts_a) == a["summary"]["num_requests"]
    assert requests_of(a, *SAME) == requests_of(b, *SAME)
    assert a["summary"].keys() == b["summary"].keys()
    assert {k: a["summary"][k] for k in SUMMED} == {k: b["summary"][k] for k in SUMMED}
    assert a.keys() == b.keys() and a["client_overhead"].keys() == b["client_overhead"].keys()


def test_two_workers_keep_one_concurrency_and_send_the_same_requests(server, valve, tmp_path):
    one = run(server, tmp_path / "one", "--concurrency", "4", "--num-requests", "12")
    valve.reset()
    server.app.state.prompts.clear()
    flags = ("--concurrency", "4", "--num-requests", "12", "--num-workers", "2")
    box: dict = {}
    with valve.held():
        thread = threading.Thread(target=lambda: box.update(rc=main(argv(server, tmp_path / "two", *flags))))
        thread.start()
        step_through(valve, 4, 12)  # one answer at a time: a fifth request in flight would show in max_in_flight
        thread.join(120)
    assert box == {"rc": 0}
    assert valve.max_in_flight == 4 and len(valve.arrivals) == 12  # 2 + 2 slots, one request counter
    [result] = load_runs(tmp_path / "two")
    assert_same_requests(one, (result, sorted(map(str, server.app.state.prompts))))
    assert (one[0]["num_workers"], result["num_workers"]) == (1, 2)
    workers = result["client_overhead"]["workers"]
    assert len(workers) == 2 and sum(w["num_requests"] for w in workers) == 12
    assert result["client_overhead"]["cpu_per_wall_s"] == pytest.approx(sum(w["cpu_per_wall_s"] for w in workers))
    assert {r["plan"]["concurrency"] for r in (one[0], result)} == {4}  # the run's plan, not a worker's share


def test_open_loop_workers_share_the_schedule(server, valve, tmp_path):
    flags = ("--request-rate", "50", "--num-requests", "10", "--seed", "3")
    one = run(server, tmp_path / "one", *flags)
    two = run(server, tmp_path / "two", *flags, "--num-workers", "2")
    assert_same_requests(one, two)
    # the same Poisson arrival times, kept by both workers against the one start the parent gave them
    assert requests_of(one[0], "scheduled") == requests_of(two[0], "scheduled")
    assert all(r["send"] >= r["scheduled"] - EARLY for r in two[0]["requests"])
    # worker 1 owns arrivals 0, 2, 4, ... and worker 2 arrivals 1, 3, 5, ...
    assert [w["num_requests"] for w in two[0]["client_overhead"]["workers"]] == [5, 5]


def test_trace_and_sweep_run_every_step_in_workers(server, valve, tmp_path):
    trace = tmp_path / "trace.jsonl"
    trace.write_text("".join(f'{{"timestamp": {t}, "prompt_len": 4, "output_len": 2}}\n' for t in (0, 0.05, 0.1)))
    flags = ("--dataset", "trace", "--dataset-path", str(trace), "--load-mode", "trace", "--num-workers", "2")
    result, _ = run(server, tmp_path / "trace", *flags)
    assert result["num_workers"] == 2 and [r["scheduled"] for r in result["requests"]] == [0, 0.05, 0.1]
    flags = ("--load-mode", "sweep", "--num-requests", "4", "--sweep-num-rates", "1", "--sweep-max-concurrency", "4")
    assert main(argv(server, tmp_path / "sweep", *flags, "--sweep-arrival", "constant", "--num-workers", "2")) == 0
    runs = load_runs(tmp_path / "sweep")
    # one at a time keeps only one worker busy; saturation and the rate run use both
    assert [r["num_workers"] for r in runs] == [1, 2, 2]
    assert [r["summary"]["num_ok"] for r in runs] == [4, 4, 4]


# ---- faults: real child processes ----------------------------------------------------------------


def start_bench(server, out, *flags) -> subprocess.Popen:
    cmd = [sys.executable, "-m", "model_optimizer.cli.main", *argv(server, out, *flags)]
    return subprocess.Popen(
        cmd, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True
    )


def group_members(pgid: int) -> dict[int, str]:
    """Live (not zombie) processes of a process group: pid -> command line."""
    found = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
            cmdline = (stat.parent / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue  # it ended while we looked
        if int(fields[2]) == pgid and fields[0] != "Z":
            found[int(stat.parent.name)] = cmdline
    return found


def workers_of(pgid: int) -> list[int]:
    return sorted(pid for pid, cmd in group_members(pgid).items() if "spawn_main" in cmd)


def wait_until(condition, what: str, timeout: float = 120.0) -> None:
    """A bound on a hang, not a bet on speed."""
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"still waiting after {timeout:.0f} s for {what}")
        time.sleep(0.05)


def wait_idle(valve) -> None:
    valve.open()
    wait_until(lambda: valve.in_flight == 0, "the server to finish the requests of the stopped bench")


def test_a_dead_worker_fails_the_run_with_a_clear_error(server, valve, tmp_path):
    with valve.held():
        proc = start_bench(server, tmp_path, "--concurrency", "4", "--num-requests", "8", "--num-workers", "2")
        valve.wait_arrivals(4, timeout=120)  # both workers have requests in flight
        victim = workers_of(proc.pid)[0]
        os.kill(victim, signal.SIGKILL)
        out, err = proc.communicate(timeout=60)
    assert proc.returncode == 1, (out, err)
    assert "mopt bench: error: bench worker" in err and "died (killed by SIGKILL)" in err
    assert "Traceback" not in err
    assert not list(tmp_path.glob("run-*")) and not list(tmp_path.glob(".*tmp"))
    wait_until(lambda: not group_members(proc.pid), "the other worker to be stopped")
    wait_idle(valve)


def test_ctrl_c_stops_every_worker_and_saves_the_run_in_progress(server, valve, tmp_path):
    flags = ("--load-mode", "sweep", "--num-requests", "2", "--sweep-max-concurrency", "4", "--num-workers", "2")
    with valve.held():
        valve.release(2)  # the one-at-a-time run goes through; the saturation run is held
        proc = start_bench(server, tmp_path, *flags)
        valve.wait_arrivals(4, timeout=120)
        assert len(workers_of(proc.pid)) == 2
        os.killpg(proc.pid, signal.SIGINT)  # what a terminal's Ctrl-C does: the whole foreground group
        out, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, (out, err)
    assert "interrupted" in out and "Traceback" not in err
    # the finished run, then the one in progress: its held requests cancelled after the grace, marked so
    saturation = "run-02-sweep-saturation-concurrency-2.json"
    assert sorted(p.name for p in tmp_path.glob("run-*.json")) == ["run-01-sweep-one-at-a-time.json", saturation]
    assert load_run(str(tmp_path / "run-01-sweep-one-at-a-time.json"))["summary"]["num_ok"] == 2
    partial = load_run(str(tmp_path / saturation))
    assert partial["interrupted"] is True and partial["stop_reason"] == "SIGINT"
    assert partial["summary"]["errors"] == {"cancelled": 2} and partial["num_workers"] == 2
    assert (tmp_path / "report.html").exists() and not list(tmp_path.glob(".*tmp"))
    wait_until(lambda: not group_members(proc.pid), "every worker to be stopped")
    wait_idle(valve)


def test_workers_exit_when_the_bench_is_killed(server, valve, tmp_path):
    with valve.held():
        proc = start_bench(server, tmp_path, "--concurrency", "2", "--num-requests", "4", "--num-workers", "2")
        valve.wait_arrivals(2, timeout=120)
        assert len(workers_of(proc.pid)) == 2
        proc.kill()  # kill -9: no chance to stop them; each worker watches its parent
        proc.communicate(timeout=30)
        wait_until(lambda: not group_members(proc.pid), "the orphaned workers to exit")
    wait_idle(valve)


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT], ids=lambda sig: sig.name)
def test_a_signal_to_the_whole_group_keeps_what_every_worker_measured(server, valve, tmp_path, sig):
    """`kill -TERM -PGID`, `timeout` or a terminal's Ctrl-C reach the workers too: they leave the
    stopping to the parent, so the requests each of them finished are in the saved run."""
    with valve.held():
        valve.release(2)  # the first two answers go through; the two requests sent after them are held
        proc = start_bench(server, tmp_path, "--concurrency", "4", "--num-requests", "8", "--num-workers", "2")
        valve.wait_arrivals(6, timeout=120)
        assert len(workers_of(proc.pid)) == 2
        os.killpg(proc.pid, sig)
        out, err = proc.communicate(timeout=60)
    assert proc.returncode == {signal.SIGTERM: 143, signal.SIGINT: 130}[sig], (out, err)
    assert f"interrupted ({sig.name})" in out and "Traceback" not in err
    [run] = load_runs(tmp_path)
    assert run["interrupted"] is True and run["stop_reason"] == sig.name and run["num_workers"] == 2
    summary = run["summary"]
    assert (summary["num_requests"], summary["num_ok"], summary["errors"]) == (6, 2, {"cancelled": 4})
    assert [r["index"] for r in run["requests"]] == list(range(6))
    wait_until(lambda: not group_members(proc.pid), "every worker to be stopped")
    wait_idle(valve)


def test_a_signal_while_the_workers_start_stops_the_run_without_killing_them(server, valve, tmp_path):
    """Signalled as soon as both worker processes exist (still importing, most likely): a worker
    spawned with the signals held ignores it once started, so the run ends as interrupted, not as a
    dead worker."""
    with valve.held():
        proc = start_bench(server, tmp_path, "--concurrency", "4", "--num-requests", "8", "--num-workers", "2")
        wait_until(lambda: len(workers_of(proc.pid)) == 2, "both workers to be spawned")
        os.killpg(proc.pid, signal.SIGTERM)
        out, err = proc.communicate(timeout=60)
    assert proc.returncode == 143, (out, err)
    [run] = load_runs(tmp_path)
    assert run["interrupted"] is True and run["stop_reason"] == "SIGTERM"
    assert run["summary"]["num_ok"] == 0 and set(run["summary"]["errors"]) <= {"cancelled"}
    wait_until(lambda: not group_members(proc.pid), "every worker to be stopped")
    wait_idle(valve)
