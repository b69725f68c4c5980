"""A trial whose server refuses every request alike (a wrong key: 401) is a failed trial naming why, and the
study goes on: `mopt bench` stops such a load after its first refusals (bench/stopping.py) and the tuner
takes that stop as the trial's failure. Real `mopt tune` runs, real SQLite files, the trials' servers
fake_openai_server.py."""

from __future__ import annotations

from model_optimizer.cli.main import main
from tests.optimizer.tune.tune_runs import server_cmd, space_file, trials, tune_argv


def test_a_server_refusing_every_request_fails_its_trial_with_the_reason(tmp_path):
    out = tmp_path / "study"
    argv = tune_argv(
        out, space_file(tmp_path), "--trials", "1", "--num-requests", "12", cmd=server_cmd("--refuse", "401")
    )
    main(argv)
    (trial,) = trials(out)
    assert trial.state.name == "FAIL"
    assert "refused every request" in trial.user_attrs["error"], trial.user_attrs["error"]
