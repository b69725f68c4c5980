"""A trial cut short is measured again on --resume, and its server does not outlive the tuner.

SIGHUP stops a study as Ctrl-C does (the server stopped, the trial marked interrupted, the reports
written); a tuner killed outright leaves its server running, which --resume stops after checking the
recorded pid is still that server, never a process that got the pid since. An interrupted trial is not
one of --trials and its settings are measured again, a grid's point included. Real `mopt tune`
processes stopped at an event (the trial's server holding a request: fake_openai_server.py --hold),
real SQLite files."""

from __future__ import annotations

import json
import signal
import subprocess

import optuna

from model_optimizer.cli.main import main
from model_optimizer.optimizer.tune.server_process import process_start_time
from model_optimizer.optimizer.tune.study import STUDY_NAME
from tests.optimizer.tune.tune_runs import (
    kill_fake_server,
    running,
    server_cmd,
    space_file,
    start_tune,
    trials,
    tune_argv,
    wait_gone,
    wait_held,
)


def stop_in_trial_0(argv: list[str], hold, sig: int) -> tuple[int, int, str]:
    """Run `mopt tune`, send `sig` while its trial 0's server holds a request; (exit code, server pid, output)."""
    hold.touch()
    proc = start_tune(argv)
    try:
        server = wait_held(hold, proc)
        proc.send_signal(sig)
        output = proc.communicate(timeout=120)[0]
    finally:
        if proc.poll() is None:
            proc.kill()
        hold.unlink()
    return proc.returncode, server, output


def test_sighup_stops_the_study_like_ctrl_c(tmp_path):
    out, hold = tmp_path / "study", tmp_path / "hold"
    argv = tune_argv(out, space_file(tmp_path), "--trials", "2", cmd=server_cmd("--hold", str(hold)))
    code, server, output = stop_in_trial_0(argv, hold, signal.SIGHUP)
    try:
        assert code == 130, output  # was killed by the signal: no reports, its server left running
        assert wait_gone(server), "the trial's server outlived the tuner"
        assert f"mopt tune --resume --output-dir {out}" in output
        (trial,) = trials(out)
        assert trial.state.name == "FAIL" and trial.user_attrs["error"].startswith("interrupted")
        assert (out / "results.json").is_file()
    finally:
        kill_fake_server(server)


def test_resume_stops_the_server_a_killed_tuner_left_and_measures_its_trial_again(tmp_path, capsys):
    out, hold = tmp_path / "study", tmp_path / "hold"
    argv = tune_argv(out, space_file(tmp_path), "--trials", "1", cmd=server_cmd("--hold", str(hold)))
    code, server, _ = stop_in_trial_0(argv, hold, signal.SIGKILL)
    try:
        assert code == -signal.SIGKILL and running(server)  # the server, in its own session, runs on
        assert main(["tune", "--resume", "--output-dir", str(out), "--trials", "1"]) == 0
        assert not running(server)
        assert "stopped the server(s) that interrupted trial(s) 0 left running" in capsys.readouterr().out
    finally:
        kill_fake_server(server)
    interrupted, measured = trials(out)  # the interrupted trial is not one of --trials 1
    assert interrupted.state.name == "FAIL" and interrupted.user_attrs["error"].startswith("interrupted")
    assert measured.state.name == "COMPLETE" and measured.user_attrs["rerun_of"] == 0
    assert measured.params == interrupted.params


def test_resume_leaves_alone_a_process_that_got_the_recorded_pid(tmp_path):
    """A trial left RUNNING whose server.json names a live process started at another time: a reused pid."""
    out = tmp_path / "study"
    assert main(tune_argv(out, space_file(tmp_path), "--trials", "1")) == 0
    study = optuna.load_study(study_name=STUDY_NAME, storage=f"sqlite:///{out / 'study.db'}")
    left = study.ask()  # RUNNING, as a killed tuner leaves its trial
    stranger = subprocess.Popen(["sleep", "300"], start_new_session=True)
    try:
        record = {"pid": stranger.pid, "start_time": process_start_time(stranger.pid) - 1, "argv": ["server"]}
        trial_dir = out / "trials" / f"{left.number:04d}"
        trial_dir.mkdir(parents=True)
        (trial_dir / "server.json").write_text(json.dumps(record))
        assert main(["tune", "--resume", "--output-dir", str(out), "--trials", "1"]) == 0
        assert stranger.poll() is None, "an unrelated process was signalled"
    finally:
        stranger.kill()
        stranger.wait()
    assert trials(out)[left.number].user_attrs["error"].startswith("interrupted")


def test_an_interrupted_grid_point_is_measured_on_resume(tmp_path):
    out, hold = tmp_path / "study", tmp_path / "hold"
    space = space_file(tmp_path, "max_num_seqs: [1, 2]\n")
    argv = tune_argv(out, space, "--sampler", "grid", cmd=server_cmd("--hold", str(hold)))
    code, server, output = stop_in_trial_0(argv, hold, signal.SIGINT)
    kill_fake_server(server)
    assert code == 130, output
    assert main(["tune", "--resume", "--output-dir", str(out)]) == 0
    measured = sorted(t.params["max_num_seqs"] for t in trials(out) if t.state.name == "COMPLETE")
    assert measured == [1, 2]  # the point interrupted in trial 0 was dropped
