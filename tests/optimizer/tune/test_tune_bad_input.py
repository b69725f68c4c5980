"""`mopt tune` with an output folder it cannot use as a study: a study.db that is no SQLite file, a
tune.json that is not what tune wrote, a study.db of another study. Each is one error line and exit code
2 before any trial, and the files are left as they were. Real `mopt tune` runs and real SQLite files; the
trials' server is a --server-cmd that exits at once, so no model loads."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import optuna

from model_optimizer.cli.main import main
from model_optimizer.optimizer.tune.study import STUDY_NAME

FAILING_SERVER = '{python} -c "raise SystemExit(3)" {flags}'
LOAD = ["--num-requests", "1", "--prompt-len", "4", "--output-len", "2", "--no-predict"]


def tune(out: Path, space: str, *extra: str) -> int:
    space_file = out.parent / f"{out.name}-space.yaml"
    space_file.write_text(space)
    argv = ["tune", "--output-dir", str(out), "--space", str(space_file), "--server-cmd", FAILING_SERVER]
    return main([*argv, "--trials", "1", *LOAD, *extra])


def test_a_study_db_that_is_not_sqlite_is_refused(tmp_path, capsys):
    out = tmp_path / "study"
    out.mkdir()
    (out / "study.db").write_text("not a database\n")
    assert tune(out, "max_num_seqs: [1, 2]\n") == 2  # was sqlalchemy's DatabaseError traceback
    err = capsys.readouterr().err
    assert (
        err.strip()
        == f"mopt tune: error: {out / 'study.db'} is not a SQLite file: move it away, or give another --output-dir"
    )
    assert (out / "study.db").read_text() == "not a database\n"


def test_a_tune_json_that_tune_did_not_write_is_refused_on_resume(tmp_path, capsys):
    out = tmp_path / "study"
    assert tune(out, "max_num_seqs: [1, 2]\n") == 1  # the one trial failed: nothing to recommend
    capsys.readouterr()
    stored = json.loads((out / "tune.json").read_text())
    for broken, message in [
        ({}, "lacks model, space"),  # was KeyError: 'space'
        ([stored], "must hold a JSON object"),  # was AttributeError
        ({**stored, "load": {**stored["load"], "bogus": 1}}, "unexpected keyword argument 'bogus'"),
    ]:
        (out / "tune.json").write_text(json.dumps(broken))
        assert main(["tune", "--resume", "--output-dir", str(out), "--trials", "2"]) == 2
        err = capsys.readouterr().err
        assert err.startswith(f"mopt tune: error: --resume: {out / 'tune.json'}") and message in err, err


def test_resuming_a_study_db_of_another_space_is_refused_and_leaves_it_alone(tmp_path, capsys):
    """The study.db of a study over enable_prefix_caching, beside the tune.json of one over max_num_seqs:
    resumed, its trials were ranked with these and a trial of the other study became best.yaml."""
    searched_a, searched_b = tmp_path / "a", tmp_path / "b"
    assert tune(searched_a, "max_num_seqs: [1, 2]\n") == 1
    assert tune(searched_b, "enable_prefix_caching: [true, false]\n") == 1
    shutil.copy(searched_b / "study.db", searched_a / "study.db")
    before = (searched_a / "study.db").read_bytes()
    capsys.readouterr()
    assert main(["tune", "--resume", "--output-dir", str(searched_a), "--trials", "2"]) == 2
    err = capsys.readouterr().err
    assert "trial 0" in err and "searches enable_prefix_caching, which the space in tune.json does not" in err, err
    assert (searched_a / "study.db").read_bytes() == before


def test_resuming_with_values_outside_the_stored_space_is_refused(tmp_path, capsys):
    out = tmp_path / "study"
    assert tune(out, "max_num_seqs: [1, 2]\n") == 1
    stored = json.loads((out / "tune.json").read_text())
    stored["space"]["knobs"][0]["choices"] = [4, 8]  # another study's choices for the same knob
    (out / "tune.json").write_text(json.dumps(stored))
    capsys.readouterr()
    assert main(["tune", "--resume", "--output-dir", str(out), "--trials", "2"]) == 2
    assert "not among the space's choices [4, 8]" in capsys.readouterr().err
    trials = optuna.load_study(study_name=STUDY_NAME, storage=f"sqlite:///{out / 'study.db'}").trials
    assert len(trials) == 1  # nothing was added


def test_resuming_the_same_study_still_works(tmp_path, capsys):
    out = tmp_path / "study"
    assert tune(out, "max_num_seqs: [1, 2]\n") == 1
    assert main(["tune", "--resume", "--output-dir", str(out), "--trials", "2"]) == 1
    trials = optuna.load_study(study_name=STUDY_NAME, storage=f"sqlite:///{out / 'study.db'}").trials
    assert [t.state.name for t in trials if t.state.name != "PRUNED"] == ["FAIL", "FAIL"]
