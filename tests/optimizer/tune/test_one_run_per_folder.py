"""One output folder, one study, one run at a time: a second run on a folder in use is refused (it had
marked the first run's trial interrupted, and the first crashed telling optuna its result), an earlier
study's reports without its study.db are not overwritten, and a study.db measured with another model,
workload or SLO than tune.json's is refused on --resume. Real `mopt tune` runs, real SQLite files, the
trials' servers fake_openai_server.py."""

from __future__ import annotations

import json

from model_optimizer.cli.main import main
from tests.cli_errors import error_line
from tests.optimizer.tune.tune_runs import (
    kill_fake_server,
    server_cmd,
    space_file,
    start_tune,
    trials,
    tune_argv,
    wait_held,
)


def test_a_second_run_on_a_folder_in_use_is_refused_and_the_first_ends_well(tmp_path, capsys):
    out, hold = tmp_path / "study", tmp_path / "hold"
    hold.touch()
    # --trial-timeout bounds the held trial should the second run take it over (the bug): a failure, not a hang
    argv = tune_argv(
        out, space_file(tmp_path), "--trials", "1", "--trial-timeout", "60", cmd=server_cmd("--hold", str(hold))
    )
    first = start_tune(argv)
    server = None
    try:
        server = wait_held(hold, first)  # the first run is measuring its trial 0
        for second in (["tune", "--resume", "--output-dir", str(out), "--trials", "2"], argv):
            line = error_line(second, capsys)
            assert f"--output-dir {out} is in use by another mopt tune run" in line, line
        hold.unlink()
        output = first.communicate(timeout=120)[0]
    finally:
        if first.poll() is None:
            first.kill()
        if server is not None:
            kill_fake_server(server)
    assert first.returncode == 0, output
    assert [t.state.name for t in trials(out)] == ["COMPLETE"]
    assert not (out / ".tune.lock").exists()


def test_an_earlier_study_s_reports_without_its_study_db_are_not_overwritten(tmp_path, capsys):
    out = tmp_path / "study"
    space = space_file(tmp_path)
    assert main(tune_argv(out, space, "--trials", "1")) == 0
    (out / "study.db").unlink()
    before = {name: (out / name).read_bytes() for name in ("results.json", "best.yaml", "report.html")}
    capsys.readouterr()
    line = error_line(tune_argv(out, space, "--trials", "1"), capsys)
    assert line == (
        f"mopt tune: error: --output-dir {out} holds the outputs of an earlier study (tune.json, results.json, "
        "best.yaml, commands.txt, report.html, trials) but no study.db to continue: give another --output-dir, "
        "or remove them"
    )
    assert {name: (out / name).read_bytes() for name in before} == before
    assert not (out / "study.db").exists()


def test_a_study_db_measured_with_other_settings_than_tune_json_is_refused_on_resume(tmp_path, capsys):
    out = tmp_path / "study"
    assert main(tune_argv(out, space_file(tmp_path), "--trials", "1", "--slo", "ttft_p99=60s")) == 0
    stored = json.loads((out / "tune.json").read_text())
    db = out / "study.db"
    before = db.read_bytes()
    capsys.readouterr()
    for edit, flag, was, now in [
        (lambda s: s | {"model": "other-model"}, "--model", '"fake"', '"other-model"'),
        (lambda s: s | {"workload": s["workload"] | {"prompt_len": "64"}}, "--prompt-len", '"4"', '"64"'),
        (lambda s: s | {"slo": "ttft_p99=1s"}, "--slo", '"ttft_p99=60s"', '"ttft_p99=1s"'),
    ]:
        (out / "tune.json").write_text(json.dumps(edit(json.loads(json.dumps(stored)))))
        line = error_line(["tune", "--resume", "--output-dir", str(out), "--trials", "2"], capsys)
        assert line == (
            f"mopt tune: error: --resume: {db} holds a study measured with {flag} {was}, but {out / 'tune.json'} "
            f"says {now}: the file is another study's; give another --output-dir"
        )
        assert db.read_bytes() == before
    (out / "tune.json").write_text(json.dumps(stored))  # its own tune.json: the study goes on
    assert main(["tune", "--resume", "--output-dir", str(out), "--trials", "2"]) == 0
    assert [t.state.name for t in trials(out)].count("COMPLETE") == 2
