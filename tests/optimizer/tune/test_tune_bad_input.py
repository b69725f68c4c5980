"""`mopt tune` with an output folder it cannot use as a study: a study.db that is no SQLite file, a
tune.json that is not what tune wrote, a study.db of another study. Each is one error line and exit code
2 before any trial, and the files are left as they were. Real `mopt tune` runs and real SQLite files; the
trials' server is a --server-cmd that exits at once, so no model loads."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import optuna
import pytest

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


def test_a_damaged_study_db_is_refused_in_one_line(tmp_path, capsys):
    out = tmp_path / "study"
    assert tune(out, "max_num_seqs: [1, 2]\n") == 1  # a real study.db: one failed trial
    db = out / "study.db"
    with db.open("r+b") as file:  # cut short, its SQLite header kept: was an 83-line sqlalchemy traceback
        file.truncate(5000)
    capsys.readouterr()
    runs = (
        lambda: tune(out, "max_num_seqs: [1, 2]\n"),
        lambda: main(["tune", "--output-dir", str(out), "--resume", "--trials", "2"]),
    )
    for run in runs:
        assert run() == 2
        err = capsys.readouterr().err.strip()
        assert err.startswith(f"mopt tune: error: {db} is damaged (") and "\n" not in err
    assert db.stat().st_size == 5000  # left as it was


def test_a_damaged_study_db_in_a_folder_named_with_a_hash_is_refused(tmp_path, capsys):
    """The damage check opens study.db through a SQLite URI, where a '#' starts the fragment: the path was cut
    there, so the check opened (and created) an empty file `run` beside the folder and let the damage by."""
    out = tmp_path / "run#1"
    assert tune(out, "max_num_seqs: [1, 2]\n") == 1  # a real study.db: one failed trial
    db = out / "study.db"
    with db.open("r+b") as file:
        file.truncate(5000)
    capsys.readouterr()
    assert tune(out, "max_num_seqs: [1, 2]\n") == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith(f"mopt tune: error: {db} is damaged (") and "\n" not in err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["run#1", "run#1-space.yaml"]  # no stray file


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


def _truncated_model(tiny_model, tmp_path: Path) -> Path:
    folder = tmp_path / "truncated"
    shutil.copytree(tiny_model("qwen3"), folder)
    weights = folder / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[: weights.stat().st_size // 2])
    return folder


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (["--model", "/nonexistent/model"], "model folder /nonexistent/model does not exist"),
        (["--model", "TRUNCATED"], "model.safetensors is truncated"),
        (["--ready-timeout", "nan"], "--ready-timeout must be a positive number of seconds, got nan"),
        (["--ready-timeout", "0"], "--ready-timeout must be a positive number of seconds, got 0.0"),
        (["--trial-timeout", "-1"], "--trial-timeout must be a positive number of seconds, got -1.0"),
        (["--seed", "-1"], "--seed must be in 0..4294967295 (the sampler's range), got -1"),
        (["--seed", "4294967296"], "--seed must be in 0..4294967295"),
    ],
)
def test_inputs_no_trial_could_use_are_refused_before_the_study(tiny_model, tmp_path, capsys, flags, message):
    """Each made the study and ran a trial that failed (exit 1), or was accepted ("not ready within nan s");
    optuna's seed message named no flag. Tune serves --model itself here (no --server-cmd)."""
    flags = [str(_truncated_model(tiny_model, tmp_path)) if f == "TRUNCATED" else f for f in flags]
    capsys.readouterr()  # building the tiny model writes progress bars
    out = tmp_path / "study"
    assert main(["tune", "--output-dir", str(out), "--trials", "1", *LOAD, *flags]) == 2
    err = capsys.readouterr().err
    assert err.startswith("mopt tune: error: ") and message in err and len(err.strip().splitlines()) == 1, err
    assert not out.exists()


def test_an_external_server_may_name_a_model_that_is_no_local_folder(tmp_path, capsys):
    """With --server-cmd, --model is whatever the server takes (a Hub name for vLLM): not checked as a folder."""
    out = tmp_path / "study"
    argv = ["tune", "--output-dir", str(out), "--server-cmd", FAILING_SERVER, "--model", "org/not-a-local-folder"]
    assert main([*argv, "--trials", "1", *LOAD]) == 1  # the study ran; its one trial's server failed
    assert (out / "tune.json").is_file()


def test_an_empty_output_dir_is_refused(capsys):
    assert main(["tune", "--output-dir", "", "--trials", "1", *LOAD]) == 2  # was the current folder
    assert capsys.readouterr().err.strip() == "mopt tune: error: --output-dir is empty; give a folder"
