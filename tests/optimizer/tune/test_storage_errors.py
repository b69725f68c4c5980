"""A study.db that cannot be written is one error line and exit code 2, not optuna's traceback: a read-only
file on --resume, and a write refused mid-study (a file-size limit standing in for a full disk: SQLite
reports both as an I/O failure of the write). What was written is kept, and --resume continues once the
file can be written, measuring again the trial the failure left RUNNING. Real `mopt tune` processes and
real SQLite files; as root, the run drops the capability that lets root write a read-only file
(setpriv), so the file's mode is what stops the write."""

from __future__ import annotations

import os
import resource
import shutil
import signal
import sqlite3
from pathlib import Path

import pytest

from model_optimizer.cli.main import main
from tests.optimizer.tune.tune_runs import space_file, start_tune, trials, tune_argv

NO_DAC_OVERRIDE = ("setpriv", "--bounding-set", "-dac_override,-dac_read_search", "--")


def run_tune(argv: list[str], **kwargs) -> tuple[int, str]:
    proc = start_tune(argv, **kwargs)
    try:
        output = proc.communicate(timeout=300)[0]
    finally:
        if proc.poll() is None:
            proc.kill()
    return proc.returncode, output


def error_of(output: str, db: Path) -> str:
    """The run's last line, checked to be the one-line storage error (and no traceback before it)."""
    assert "Traceback" not in output, output
    line = output.strip().splitlines()[-1]
    assert line.startswith(f"mopt tune: error: {db}: "), output
    assert line.endswith(
        "the study so far is kept: once the file can be written, continue it with mopt tune --resume "
        f"--output-dir {db.parent}"
    ), output
    return line


def quick_check(db: Path) -> str:
    with sqlite3.connect(f"file:{db}?mode=ro", uri=True) as connection:
        return connection.execute("PRAGMA quick_check").fetchone()[0]


@pytest.mark.skipif(os.geteuid() == 0 and not shutil.which("setpriv"), reason="root writes a read-only file")
def test_a_read_only_study_db_on_resume_is_one_error_line(tmp_path):
    out = tmp_path / "study"
    assert main(tune_argv(out, space_file(tmp_path), "--trials", "1")) == 0
    db = out / "study.db"
    db.chmod(0o444)
    before = db.read_bytes()
    prefix = NO_DAC_OVERRIDE if os.geteuid() == 0 else ()
    code, output = run_tune(["tune", "--resume", "--output-dir", str(out), "--trials", "2"], prefix=prefix)
    assert code == 2, output
    assert "attempt to write a readonly database" in error_of(output, db)
    assert db.read_bytes() == before


def test_a_write_refused_mid_study_is_one_error_line_and_resume_goes_on(tmp_path):
    out = tmp_path / "study"
    space = space_file(tmp_path, "max_num_seqs: [1, 2, 3, 4, 5, 6, 7, 8]\n")
    assert main(tune_argv(out, space, "--trials", "1")) == 0
    db = out / "study.db"
    limit = db.stat().st_size  # the file may not grow: the first trial that needs a new page fails

    def no_growth() -> None:  # in the child: EFBIG instead of SIGXFSZ past the limit
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))

    code, output = run_tune(["tune", "--resume", "--output-dir", str(out), "--trials", "8"], preexec_fn=no_growth)
    assert code == 2, output
    assert "disk I/O error" in error_of(output, db) or "full" in output
    assert quick_check(db) == "ok"
    assert main(["tune", "--resume", "--output-dir", str(out), "--trials", "8"]) == 0
    stored = trials(out)
    assert "RUNNING" not in {t.state.name for t in stored}
    interrupted = [t.number for t in stored if str(t.user_attrs.get("error")).startswith("interrupted")]
    rerun = {t.user_attrs.get("rerun_of"): t.state.name for t in stored}
    assert all(rerun.get(n) == "COMPLETE" for n in interrupted)  # the trial left RUNNING, measured again
    measured = [t for t in stored if t.state.name in ("COMPLETE", "FAIL") and t.number not in interrupted]
    assert len(measured) == 8  # the limit also failed trials (their bench files could not be written)
