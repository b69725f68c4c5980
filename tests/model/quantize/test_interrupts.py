"""`mopt quantize` stopped by SIGTERM (`kill`, `timeout`, a batch scheduler) as a real process: the run
ended at once and left its hidden staging folder (a whole copy of the model) and lock file beside the
output. Now it removes them as on Ctrl-C, says so in one line and exits 143."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from model_optimizer.cli.main import main
from model_optimizer.common.fileio import staging_dir
from model_optimizer.model.quantize.job import remove_stale_staging

REPO = Path(__file__).resolve().parents[3]
EVAL = ["--num-eval-samples", "64", "--eval-seq-len", "256", "--device", "cpu"]
"""Enough held-out windows that the evaluation, which starts once the folder is staged, is still running
when the signal comes."""


def _terminated_while_evaluating(argv: list[str]) -> subprocess.CompletedProcess | None:
    """Run `mopt ARGV`, SIGTERM it as its evaluation starts; None when it finished before the signal."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "model_optimizer.cli.main", *argv],
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=os.environ | {"OMP_NUM_THREADS": "1"},
    )
    lines = []
    for line in proc.stderr:  # off a terminal every phase starts with a plain line
        lines.append(line)
        if line.startswith("mopt quantize: evaluation: "):
            proc.send_signal(signal.SIGTERM)
            break
    out, err = proc.communicate(timeout=120)
    if proc.returncode == 0:
        return None
    return subprocess.CompletedProcess(proc.args, proc.returncode, out, "".join(lines) + err)


@pytest.mark.slow
def test_sigterm_while_evaluating_leaves_nothing_beside_the_output(quant_model, tmp_path):
    for attempt in range(3):  # a run that ends between its start and the signal is tried again
        parent = tmp_path / f"parent{attempt}"
        parent.mkdir()
        argv = ["quantize", str(quant_model("qwen3")), "--method", "int8", "--output", str(parent / "q"), *EVAL]
        done = _terminated_while_evaluating(argv)
        if done is None:
            continue
        assert done.returncode == 143, done.stderr
        last = done.stderr.strip().splitlines()[-1]
        assert last == f"mopt quantize: terminated (SIGTERM); nothing was written to {parent / 'q'}", done.stderr
        assert "Traceback" not in done.stderr and list(parent.iterdir()) == []  # no staging folder, no lock
        return
    pytest.fail("every run ended before it could be terminated")


@pytest.mark.slow
def test_sigterm_during_eval_only_keeps_the_folder_s_report(quant_model, tmp_path):
    model, out = str(quant_model("qwen3")), tmp_path / "q"
    small = ["--num-eval-samples", "2", "--eval-seq-len", "64", "--device", "cpu"]
    assert main(["quantize", model, "--method", "int8", "--output", str(out), *small]) == 0
    before = {p.name: p.read_bytes() for p in out.iterdir()}
    for _ in range(3):
        done = _terminated_while_evaluating(["quantize", "--eval-only", str(out), "--reference", model, *EVAL])
        if done is None:  # it finished: its report replaced the first; start again from that one
            before = {p.name: p.read_bytes() for p in out.iterdir()}
            continue
        assert done.returncode == 143, done.stderr
        assert done.stderr.strip().endswith(f"terminated (SIGTERM); the report in {out} was left as it was")
        assert {p.name: p.read_bytes() for p in out.iterdir()} == before
        assert json.loads(before["quantization_report.json"])["method"] == "int8"
        return
    pytest.fail("every run ended before it could be terminated")


def test_the_next_run_removes_what_a_killed_run_left(quant_model, tmp_path, capsys):
    """kill -9 or the out-of-memory killer leaves the staging folder (a hidden, possibly whole copy of the
    model) that no clean-up could remove; every later run left it there and made another. The next run on
    that --output removes it, holding the lock that every run building one holds, and says so."""
    stale = staging_dir(tmp_path / "q")  # as the killed run made it
    (stale / "model.safetensors").write_bytes(b"half a model")
    others = [tmp_path / ".q2.tmp-x", tmp_path / "q.tmp-not-hidden"]  # another output's, and a user's folder
    for path in others:
        path.mkdir()
    small = ["--num-eval-samples", "2", "--eval-seq-len", "64", "--device", "cpu"]
    assert (
        main(["quantize", str(quant_model("qwen3")), "--method", "int8", "--output", str(tmp_path / "q"), *small]) == 0
    )
    err = capsys.readouterr().err
    assert f"mopt quantize: warning: removed {stale}, the unfinished folder of an earlier run" in err
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(["q", *(p.name for p in others)])


def test_only_this_output_s_own_staging_folders_are_taken_for_stale(tmp_path):
    """The folders were found with a glob of the output's name: `--output 'q[1]'` removed the staging folder
    of a live run on q1, and `--output q` that of a live run on q.tmp-x and a user's `.q.tmp-backup`. Only
    the names staging_dir makes for the output itself are removed."""
    live = [staging_dir(tmp_path / "q1"), staging_dir(tmp_path / "q.tmp-x")]  # other outputs' runs, still going
    user = tmp_path / ".q.tmp-backup"
    user.mkdir()
    mine = [staging_dir(tmp_path / "q[1]"), staging_dir(tmp_path / "q")]
    assert remove_stale_staging(tmp_path / "q[1]") == [(mine[0], None)]
    assert remove_stale_staging(tmp_path / "q") == [(mine[1], None)]
    assert sorted(tmp_path.iterdir()) == sorted([*live, user])
