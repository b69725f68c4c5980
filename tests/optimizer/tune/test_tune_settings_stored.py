"""What `mopt tune` takes from the command line and stores: a relative --model folder as an absolute path
(a --resume from another folder served nothing), --request-rate inf as valid JSON that --resume reads
back, output lines kept whole when piped; and, refused before any server starts, settings the trial
command owns (--set port, --set model), a log range with a step, and SLO terms no request can meet or
given twice. Real `mopt tune` runs, real SQLite files, the trials' servers fake_openai_server.py."""

from __future__ import annotations

import json

import pytest

from model_optimizer.cli.args import read_config_file
from model_optimizer.cli.main import main
from model_optimizer.runtime.config import EngineConfig
from model_optimizer.runtime.server.config import ServerConfig
from tests.cli_errors import error_line
from tests.optimizer.tune.tune_runs import server_cmd, space_file, trials, tune_argv


def strict_json(path) -> dict:
    """`path` parsed as JSON proper: Infinity and NaN are no JSON."""

    def refuse(constant: str):
        raise ValueError(f"{path} holds {constant}, which is not JSON")

    return json.loads(path.read_text(), parse_constant=refuse)


def test_a_relative_model_folder_is_stored_absolute_and_resumes_from_elsewhere(tmp_path, monkeypatch):
    model = tmp_path / "models" / "m"
    model.mkdir(parents=True)
    (tmp_path / "elsewhere").mkdir()
    out = tmp_path / "study"
    cmd = server_cmd("--require-model-dir")  # a server that cannot find its model folder fails the trial
    monkeypatch.chdir(tmp_path)
    argv = tune_argv(out, space_file(tmp_path), "--trials", "1", cmd=cmd)
    argv[argv.index("--model") + 1] = "models/m"
    assert main(argv) == 0
    assert strict_json(out / "tune.json")["model"] == str(model)
    assert read_config_file(out / "best.yaml", (EngineConfig, ServerConfig))["model"] == str(model)
    assert f"--model {model}" in (out / "commands.txt").read_text()
    monkeypatch.chdir(tmp_path / "elsewhere")
    assert main(["tune", "--resume", "--output-dir", str(out), "--trials", "2"]) == 0
    assert [t.state.name for t in trials(out) if t.state.name != "PRUNED"] == ["COMPLETE", "COMPLETE"]


def test_a_hub_id_is_stored_as_given(tmp_path):
    out = tmp_path / "study"
    argv = tune_argv(out, space_file(tmp_path), "--trials", "1")
    argv[argv.index("--model") + 1] = "org/some-model"
    assert main(argv) == 0
    assert strict_json(out / "tune.json")["model"] == "org/some-model"


def test_request_rate_inf_is_written_as_json_and_resumed(tmp_path):
    out = tmp_path / "study"
    assert main(tune_argv(out, space_file(tmp_path), "--trials", "1", "--request-rate", "inf")) == 0
    assert strict_json(out / "tune.json")["load"]["request_rate"] == "inf"
    assert strict_json(out / "results.json")["setup"]["load"]["request_rate"] == "inf"
    assert main(["tune", "--resume", "--output-dir", str(out), "--trials", "2"]) == 0  # read back as a number
    assert [t.state.name for t in trials(out) if t.state.name != "PRUNED"] == ["COMPLETE", "COMPLETE"]


def test_piped_output_keeps_each_line_whole(tmp_path, capsys):
    out = tmp_path / ("a-folder-name-long-enough-that-its-paths-pass-eighty-columns-" * 2) / "study"
    assert main(tune_argv(out, space_file(tmp_path), "--trials", "1")) == 0
    lines = capsys.readouterr().out.splitlines()
    assert f"report: {out / 'report.html'}" in lines
    assert any(line.startswith(f"study {out / 'study.db'}: 0 trials so far; ") for line in lines)


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (["--set", "port=9000"], "--set port: the tuner gives each trial's server a free port, not --set"),
        (["--set", "model=other"], "--set model: give the model with --model, not --set"),
        (["--set", "host=0.0.0.0"], "--set host: each trial's server listens on 127.0.0.1"),
        (["--slo", "ttft_p99=1.2.3"], "--slo ttft_p99=1.2.3: "),
        (["--slo", "ttft_p99=0"], "--slo ttft_p99=0: ttft_p99 must be a positive time, got 0 s"),
        (["--slo", "ttft_p99=1s,ttft_p99=2s"], "ttft_p99 is given twice"),
    ],
)
def test_settings_the_trials_could_not_use_are_refused_before_the_study(tmp_path, capsys, flags, message):
    out = tmp_path / "study"
    line = error_line([*tune_argv(out, space_file(tmp_path), "--trials", "1"), *flags], capsys)
    assert message in line, line
    assert not out.exists()


def test_a_log_range_with_a_step_is_refused_before_the_study(tmp_path, capsys):
    out = tmp_path / "study"
    space = space_file(tmp_path, "max_num_seqs: {low: 1, high: 8, log: true, step: 2}\n")
    line = error_line(tune_argv(out, space, "--trials", "1"), capsys)
    assert "knob max_num_seqs: a log range takes no step (got step 2)" in line, line
    assert not out.exists()
