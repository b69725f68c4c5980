"""`mopt tune` with the speculative knobs in its space, a setup cut short, one-token outputs under a TPOT SLO,
and what results.json and best.yaml say of interrupted trials and a missed SLO.

A baseline over the speculative knobs is speculation off (they are no EngineConfig field: the default path,
the grid and --repeat-baseline crashed); the guided search compares its candidates as trials record them
(speculative_config), so it measures new settings instead of proposing one tried candidate until the study
ends; `speculative_method: [off, ngram]` unquoted is YAML's False, read back as `off`; a study.db without
tune.json is neither left behind by a failed setup nor a dead end; a TPOT term no request has a figure for
(one-token answers) is met, as goodput counts it. Real `mopt tune` runs (or the Tuner) over real SQLite
files, the trials' servers fake_openai_server.py."""

from __future__ import annotations

import json
import signal

import pytest

from model_optimizer.cli.main import main
from model_optimizer.optimizer.bench.client import ClientConfig
from model_optimizer.optimizer.bench.load import LoadConfig
from model_optimizer.optimizer.bench.workloads import WorkloadConfig
from model_optimizer.optimizer.tune import runner
from model_optimizer.optimizer.tune.budget import Budget
from model_optimizer.optimizer.tune.samplers import default_params
from model_optimizer.optimizer.tune.setting_types import coerce
from model_optimizer.optimizer.tune.space import Knob, SearchSpace, build_space
from model_optimizer.optimizer.tune.study import open_study
from model_optimizer.optimizer.tune.trial import TrialSetup
from model_optimizer.optimizer.tune.tuner import Tuner
from tests.optimizer.tune.test_guide import _predictor
from tests.optimizer.tune.test_resume_interrupted import stop_in_trial_0
from tests.optimizer.tune.tune_runs import kill_fake_server, server_cmd, space_file, trials, tune_argv

SPEC_SPACE = "speculative_method: ['off', ngram]\nmax_num_seqs: [1, 256]\n"
"""256 is the engine's max_num_seqs, so the space holds the defaults: a baseline."""


def measured(out) -> list:
    return [t for t in trials(out) if t.state.name in ("COMPLETE", "FAIL")]


@pytest.mark.parametrize(
    ("flags", "states"),
    [
        (["--trials", "2"], ["COMPLETE"] * 2),
        (["--sampler", "grid"], ["COMPLETE"] * 4),
        (["--trials", "3", "--repeat-baseline"], ["COMPLETE"] * 3),
    ],
)
def test_a_speculative_space_has_a_baseline_with_speculation_off(tmp_path, flags, states):
    out = tmp_path / "study"
    assert main(tune_argv(out, space_file(tmp_path, SPEC_SPACE), *flags)) == 0
    done = measured(out)
    assert [t.state.name for t in done] == states
    (baseline,) = [t for t in done if t.user_attrs.get("baseline")]
    assert baseline.params == {"speculative_method": "off", "max_num_seqs": 256}
    assert baseline.user_attrs["settings"]["speculative_config"] is None
    if "--repeat-baseline" in flags:
        assert done[-1].user_attrs.get("baseline_repeat") and done[-1].params == baseline.params


def test_a_speculative_space_without_the_defaults_runs_without_a_baseline(tmp_path, capsys):
    out = tmp_path / "study"
    space = space_file(tmp_path, "speculative_method: ['off', ngram]\nmax_num_seqs: [1, 2]\n")
    assert main(tune_argv(out, space, "--trials", "2")) == 0
    assert "no baseline trial: a default setting lies outside the searched space" in capsys.readouterr().out
    assert [t.state.name for t in measured(out)] == ["COMPLETE", "COMPLETE"]


def test_the_token_count_default_is_the_held_configs():
    held = '{"method": "ngram", "num_speculative_tokens": 3}'
    space = SearchSpace([Knob("num_speculative_tokens", choices=[2, 3])], {"speculative_config": held})
    assert default_params(space) == {"num_speculative_tokens": 3}
    moot = SearchSpace([Knob("speculative_method", choices=["off", "ngram"]), Knob("num_speculative_tokens", [5, 6])])
    assert default_params(moot) == {"speculative_method": "off", "num_speculative_tokens": 5}  # off: any count
    assert default_params(SearchSpace([Knob("speculative_method", choices=["ngram"])])) is None


def test_the_guided_search_measures_new_speculative_settings(tmp_path):
    """6 combinations, 5 trials, no baseline: 5 different settings measured (the predictor's pick was compared
    with the trials' settings in another form, so it proposed a tried one until 20 skips ended the study)."""
    setup = TrialSetup(
        "fake",
        ClientConfig(),
        WorkloadConfig(prompt_len="4", output_len="2"),
        LoadConfig(num_requests=2, concurrency=1),
        server_cmd=server_cmd(),
        ready_path="/v1/models",
        ready_timeout=120.0,  # a bound on a failed start, not a speed
    )
    space = SearchSpace(
        [Knob("speculative_method", choices=["off", "ngram"]), Knob("max_num_seqs", choices=[1, 2, 4])],
        {"num_kv_blocks": 64},
    )
    study = open_study(tmp_path, seed=0, resume=False)
    tuner = Tuner(study, space, setup, tmp_path, _predictor(), guided=True)
    tuner.run(Budget(trials=5))
    done = [t for t in study.trials if t.state.name in ("COMPLETE", "FAIL")]
    assert [t.state.name for t in done] == ["COMPLETE"] * 5
    assert len({json.dumps(t.user_attrs["settings"], sort_keys=True) for t in done}) == 5
    assert any(t.user_attrs.get("picked_by") == "predictor" for t in done)


def test_an_unquoted_off_is_speculation_off(tmp_path):
    path = space_file(tmp_path, "speculative_method: [off, ngram]\nmax_num_seqs: [1, 2]\n")
    space = build_space(str(path))
    assert space.knobs[0].choices == ["off", "ngram"]
    out = tmp_path / "study"
    assert main(tune_argv(out, path, "--trials", "2")) == 0
    assert [t.state.name for t in measured(out)] == ["COMPLETE", "COMPLETE"]


@pytest.mark.parametrize(("name", "value"), [("speculative_method", True), ("kv_cache_dtype", False)])
def test_a_yaml_boolean_no_string_knob_takes_is_refused_with_a_hint(name, value):
    with pytest.raises(ValueError, match=f"{name} must be a string, got {value}.*quote the value"):
        coerce(name, value)


def test_a_failed_setup_leaves_no_study_behind(tmp_path, monkeypatch):
    out = tmp_path / "study"
    argv = tune_argv(out, space_file(tmp_path), "--sampler", "grid")

    def broken(study, space):
        raise RuntimeError("setup failed")

    monkeypatch.setattr(runner, "enqueue_grid", broken)
    with pytest.raises(RuntimeError, match="setup failed"):
        main(argv)
    assert not (out / "study.db").exists() and not (out / "tune.json").exists()
    monkeypatch.undo()
    assert main(argv) == 0
    assert [t.state.name for t in measured(out)] == ["COMPLETE"] * 3


def test_a_study_cut_short_before_tune_json_is_started_over(tmp_path):
    """A run killed between creating study.db and writing tune.json (a grid's points queued, nothing measured):
    a new run starts the study afresh, where it said "already holds a study" and --resume "no tune.json"."""
    out = tmp_path / "study"
    out.mkdir()
    cut = open_study(out, seed=0, resume=False)
    cut.enqueue_trial({"max_num_seqs": 4})
    assert not (out / "tune.json").exists()
    assert main(tune_argv(out, space_file(tmp_path), "--trials", "2")) == 0
    assert [t.state.name for t in measured(out)] == ["COMPLETE", "COMPLETE"]
    assert (out / "tune.json").is_file()


def test_a_study_with_measured_trials_is_not_started_over(tmp_path, capsys):
    out = tmp_path / "study"
    out.mkdir()
    study = open_study(out, seed=0, resume=False)
    trial = study.ask()
    study.tell(trial, [1.0, 1.0, 1.0, 1.0, 1.0])
    assert main(tune_argv(out, space_file(tmp_path), "--trials", "1")) == 2
    assert "already holds a study" in capsys.readouterr().err
    assert [t.state.name for t in trials(out)] == ["COMPLETE"]


def test_a_tpot_slo_over_one_token_answers_is_met(tmp_path):
    """No request has a TPOT: the term is met (goodput counts every request), not every trial infeasible."""
    out = tmp_path / "study"
    argv = tune_argv(out, space_file(tmp_path, "max_num_seqs: [1, 2]\n"), "--trials", "2", "--slo", "tpot_p99=50ms")
    argv[argv.index("--output-len") + 1] = "1"
    assert main(argv) == 0
    done = measured(out)
    assert [t.state.name for t in done] == ["COMPLETE", "COMPLETE"]
    for t in done:
        assert t.user_attrs["constraints"] == [0.0]
        assert t.user_attrs["measured"]["slo_met"] is True
        assert t.user_attrs["measured"]["slo_checks"]["tpot_p99"]["undefined"] is True
    assert "no trial met the SLO" not in (out / "best.yaml").read_text()


def test_best_yaml_says_when_no_trial_met_the_slo(tmp_path):
    out = tmp_path / "study"
    argv = tune_argv(out, space_file(tmp_path, "max_num_seqs: [1, 2]\n"), "--trials", "1", "--slo", "ttft_p99=1us")
    assert main(argv) == 1 or (out / "best.yaml").is_file()
    header = (out / "best.yaml").read_text()
    assert "# no trial met the SLO (ttft_p99=1us)" in header


def test_a_killed_trial_is_counted_interrupted_not_failed(tmp_path):
    out, hold = tmp_path / "study", tmp_path / "hold"
    argv = tune_argv(out, space_file(tmp_path), "--trials", "1", cmd=server_cmd("--hold", str(hold)))
    code, server, _ = stop_in_trial_0(argv, hold, signal.SIGKILL)
    try:
        assert code == -signal.SIGKILL
        assert main(["tune", "--resume", "--output-dir", str(out), "--trials", "1"]) == 0
    finally:
        kill_fake_server(server)
    counts = json.loads((out / "results.json").read_text())["counts"]
    assert counts == {"COMPLETE": 1, "FAIL": 0, "PRUNED": 0, "INTERRUPTED": 1}
