"""Studies with real `mopt serve` subprocesses and a real SQLite file: a full run, a failing trial,
a --server-cmd template, an interrupted study resumed. Asserts on states and files, never on speed."""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import optuna
import pytest

from model_optimizer.cli.args import read_config_file
from model_optimizer.cli.main import main
from model_optimizer.optimizer.tune.budget import Budget
from model_optimizer.optimizer.tune.space import Knob, SearchSpace
from model_optimizer.optimizer.tune.study import STUDY_NAME, open_study
from model_optimizer.optimizer.tune.tuner import Tuner
from model_optimizer.runtime.config import EngineConfig
from model_optimizer.runtime.server.config import ServerConfig

REPO = Path(__file__).resolve().parents[3]
FIXED = ["--set", "max_model_len=256", "--set", "num_kv_blocks=32", "--set", "log_level=warning"]
LOAD = [
    "--num-requests",
    "3",
    "--concurrency",
    "2",
    "--prompt-len",
    "8",
    "--output-len",
    "4",
    "--ready-timeout",
    "180",
    "--trial-timeout",
    "180",
]


@pytest.fixture
def space_file(tmp_path):
    file = tmp_path / "space.yaml"
    file.write_text("max_num_seqs: [1, 2, 4]\nenable_prefix_caching: [true, false]\n")
    return file


def tune_argv(model: Path, out: Path, space: Path, *extra: str) -> list[str]:
    return [
        "tune",
        "--model",
        str(model),
        "--output-dir",
        str(out),
        "--space",
        str(space),
        "--seed",
        "0",
        "--slo",
        "ttft_p99=60s,tpot_p99=60s",
        *FIXED,
        *LOAD,
        *extra,
    ]


def states(out: Path) -> list[str]:
    study = optuna.load_study(study_name=STUDY_NAME, storage=f"sqlite:///{out / 'study.db'}")
    return [t.state.name for t in study.trials]


def assert_servers_reaped(out: Path) -> None:
    pids = [int(p.read_text()) for p in (out / "trials").glob("*/server.pid")]
    assert pids, "no trial started a server"
    for pid in pids:
        with pytest.raises(ProcessLookupError):
            os.kill(pid, 0)


@pytest.mark.slow
def test_three_trial_study_writes_every_output(tiny_model, tmp_path, space_file, capsys):
    out = tmp_path / "study"
    assert main(tune_argv(tiny_model("qwen3"), out, space_file, "--trials", "3")) == 0
    assert states(out) == ["COMPLETE"] * 3
    assert_servers_reaped(out)
    results = json.loads((out / "results.json").read_text())
    assert results["counts"] == {"COMPLETE": 3, "FAIL": 0, "PRUNED": 0, "INTERRUPTED": 0}
    for trial in results["trials"]:
        m = trial["measured"]
        assert m["ok"] and m["cold_start_s"] > 0 and m["goodput"] > 0 and m["slo_met"] is True
        assert m["memory_source"] == "rss" and m["memory_gib"] > 0
        assert trial["predicted"]["tpot_ms"] > 0  # predicted before it was measured
    assert results["best"]["number"] in results["pareto_front"]
    assert results["prediction_error"]["tpot"]["num_trials"] == 3
    assert results["predictor"]["num_fitted"] == 3 and results["predictor"]["hardware"]["is_gpu"] is False
    # the end-of-study model on its own trials, and each trial from the other two
    refitted = results["predictor"]["refitted_error"]
    assert refitted["in_sample"]["num_trials"] == 3 and refitted["leave_one_out"]["tpot_mape_pct"] is not None
    # the defaults (max_num_seqs 256) lie outside this space: the sampler draws trial 0, then the predictor picks
    assert [t.get("picked_by") for t in results["trials"]] == [None, "predictor", "predictor"]
    assert len({json.dumps(t["settings"], sort_keys=True) for t in results["trials"]}) == 3
    best = read_config_file(out / "best.yaml", (EngineConfig, ServerConfig))  # what mopt serve/deploy --config read
    assert best["model"] == str(tiny_model("qwen3")) and best["max_num_seqs"] in (1, 2, 4)
    assert best["num_kv_blocks"] == 32
    commands = (out / "commands.txt").read_text()
    assert "mopt serve --model" in commands and "vllm serve" in commands and "--num-gpu-blocks-override 32" in commands
    html = (out / "report.html").read_text()
    assert "goodput vs latency" in html and "data:image/png;base64," in html and "Predictor (measured" in html
    assert "Pareto front (measured)" in capsys.readouterr().out
    # the same folder again without --resume is refused, not overwritten
    assert main(tune_argv(tiny_model("qwen3"), out, space_file, "--trials", "1")) == 2
    assert "already holds a study" in capsys.readouterr().err


@pytest.mark.slow
def test_grid_measures_its_defaults_point_again_with_repeat_baseline(tiny_model, tmp_path):
    """A grid holding the defaults' combination marks it the baseline; --repeat-baseline adds one trial of
    it at the end (the grid's budget plus one), so the grid gets a noise estimate as a study does."""
    space = tmp_path / "space.yaml"
    space.write_text(f"max_num_seqs: [2, {EngineConfig().max_num_seqs}]\n")
    out = tmp_path / "grid"
    argv = tune_argv(tiny_model("qwen3"), out, space, "--sampler", "grid", "--repeat-baseline")
    assert main(argv) == 0
    assert states(out) == ["COMPLETE"] * 3
    results = json.loads((out / "results.json").read_text())
    seqs = [t["settings"]["max_num_seqs"] for t in results["trials"]]
    assert seqs == [2, EngineConfig().max_num_seqs, EngineConfig().max_num_seqs]
    assert results["noise"]["baseline_trials"] == [1, 2] and "goodput" in results["noise"]["figures"]


@pytest.mark.slow
def test_failing_trial_is_recorded_and_the_study_goes_on_through_a_server_cmd(tiny_model, tmp_path):
    """num_kv_blocks=1 cannot hold max_model_len: the server refuses to start; the next trial still runs.
    The servers come from a --server-cmd template (our own server standing in for an external one)."""
    from model_optimizer.optimizer.bench.client import ClientConfig
    from model_optimizer.optimizer.bench.load import LoadConfig
    from model_optimizer.optimizer.bench.workloads import WorkloadConfig
    from model_optimizer.optimizer.tune.trial import TrialSetup

    template = (
        "{python} -m model_optimizer.cli.main serve --model {model} --host {host} --port {port} "
        "--num-kv-blocks {num_kv_blocks} --max-model-len 256 --log-level warning"
    )
    setup = TrialSetup(
        str(tiny_model("qwen3")),
        ClientConfig(),
        WorkloadConfig(prompt_len="8", output_len="4"),
        LoadConfig(num_requests=2, concurrency=1),
        server_cmd=template,
        ready_path="/v1/models",
        ready_timeout=180,
        trial_timeout=180,
    )
    out = tmp_path / "study"
    out.mkdir()
    study = open_study(out, seed=0, resume=False)
    study.enqueue_trial({"num_kv_blocks": 1})
    study.enqueue_trial({"num_kv_blocks": 32})
    tuner = Tuner(study, SearchSpace([Knob("num_kv_blocks", choices=[1, 32])]), setup, out, predictor=None)
    tuner.run(Budget(trials=2))
    failed, done = study.trials
    assert failed.state.name == "FAIL" and "KV cache holds 16 tokens" in failed.user_attrs["error"]
    assert done.state.name == "COMPLETE" and done.user_attrs["measured"]["goodput"] > 0
    assert done.user_attrs["settings"] == {"num_kv_blocks": 32}
    assert_servers_reaped(out)


def interrupt_after_first_trial(argv: list[str], sig: int) -> str:
    """Run `mopt tune` as a process, send `sig` once a trial is committed to study.db; its output."""
    out = Path(argv[argv.index("--output-dir") + 1])
    proc = subprocess.Popen(
        [sys.executable, "-m", "model_optimizer.cli.main", *argv],
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        while _count_complete(out / "study.db") < 1:  # the event: one trial committed to the file
            assert proc.poll() is None, proc.stdout.read()
            time.sleep(0.2)
        proc.send_signal(sig)
        output = proc.communicate(timeout=120)[0]
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 130, output
    assert "mopt tune --resume" in output
    assert_servers_reaped(out)
    return output


@pytest.mark.slow
def test_sigterm_reaps_the_server_like_ctrl_c(tiny_model, tmp_path, space_file):
    out = tmp_path / "study"
    interrupt_after_first_trial(tune_argv(tiny_model("qwen3"), out, space_file, "--trials", "4"), signal.SIGTERM)
    assert (out / "results.json").is_file() and "RUNNING" not in states(out)


@pytest.mark.slow
def test_interrupted_study_resumes(tiny_model, tmp_path, space_file, capsys):
    out = tmp_path / "study"
    interrupt_after_first_trial(tune_argv(tiny_model("qwen3"), out, space_file, "--trials", "3"), signal.SIGINT)
    before = states(out)
    assert before[0] == "COMPLETE" and set(before) <= {"COMPLETE", "FAIL"}
    # only the budget may change on resume
    assert main(["tune", "--resume", "--output-dir", str(out), "--slo", "ttft_p99=1s"]) == 2
    assert "drop --slo" in capsys.readouterr().err
    assert main(["tune", "--resume", "--output-dir", str(out), "--trials", "3"]) == 0
    after = optuna.load_study(study_name=STUDY_NAME, storage=f"sqlite:///{out / 'study.db'}").trials
    assert [t.state.name for t in after[: len(before)]] == before  # the stored trials are kept as they were
    interrupted = [t.number for t in after if t.state.name == "FAIL"]
    assert all("interrupted" in after[n].user_attrs["error"] for n in interrupted)
    # an interrupted trial is not one of --trials 3, and its settings are measured again
    assert sum(t.state.name == "COMPLETE" for t in after) == 3
    reruns = {t.user_attrs.get("rerun_of") for t in after}
    assert all(n in reruns for n in interrupted if after[n].params)
    assert json.loads((out / "results.json").read_text())["counts"]["COMPLETE"] >= 2


def _count_complete(db: Path) -> int:
    if not db.is_file():
        return 0
    try:
        with sqlite3.connect(db, timeout=1) as conn:
            return conn.execute("select count(*) from trials where state = 'COMPLETE'").fetchone()[0]
    except sqlite3.OperationalError:  # tables not created yet
        return 0


@pytest.mark.slow
def test_seed_makes_the_sampled_candidates_reproducible(tmp_path):
    from model_optimizer.optimizer.tune.space import sample

    space = SearchSpace([Knob("max_num_seqs", choices=[1, 2, 4, 8]), Knob("block_size", low=8, high=64, log=True)])
    runs = []
    for name in ("a", "b"):
        (tmp_path / name).mkdir()
        study = open_study(tmp_path / name, seed=7, resume=False)
        picks = []
        for _ in range(6):
            trial = study.ask()
            picks.append(sample(space.knobs, trial))
            study.tell(trial, [1.0, 1.0, 1.0, 1.0, 1.0])
        runs.append(picks)
    assert runs[0] == runs[1]


@pytest.mark.slow
def test_predicted_misfit_is_skipped_without_starting_a_server(tmp_path):
    """A KV cache too small for one request is PRUNED with the reason; no server is started for it."""
    predictor, setup = _small_model_predictor_and_setup(slo=None)
    study = open_study(tmp_path, seed=0, resume=False)
    tuner = Tuner(
        study, SearchSpace([Knob("num_kv_blocks", choices=[1])]), setup, tmp_path, predictor, max_skips_in_a_row=3
    )
    tuner.run(Budget(trials=1))
    # the one candidate is always ruled out: the study stops after 3 skips in a row, having run nothing
    assert [t.state.name for t in study.trials] == ["PRUNED"] * 3
    assert study.trials[0].user_attrs["skip_reason"].startswith("KV cache holds 16 tokens, fewer than one request's 80")
    assert not (tmp_path / "trials").exists()


@pytest.mark.slow
def test_grid_queues_every_combination_in_order(tmp_path):
    from model_optimizer.optimizer.tune.samplers import enqueue_grid, grid_size, make_sampler
    from model_optimizer.optimizer.tune.space import sample

    space = SearchSpace(
        [Knob("max_num_seqs", choices=[64, 128, 256]), Knob("max_num_batched_tokens", choices=[2048, 8192])]
    )
    assert grid_size(space) == 6
    make_sampler("grid", 0, space)
    study = open_study(tmp_path, seed=0, resume=False, sampler="grid", space=space)
    enqueue_grid(study, space)
    queued = [sample(space.knobs, study.ask()) for _ in range(6)]
    assert [(p["max_num_seqs"], p["max_num_batched_tokens"]) for p in queued] == [
        (64, 2048),
        (64, 8192),
        (128, 2048),
        (128, 8192),
        (256, 2048),
        (256, 8192),
    ]
    with pytest.raises(ValueError, match="needs a list of choices"):
        make_sampler("grid", 0, SearchSpace([Knob("gpu_memory_utilization", low=0.8, high=0.9)]))


@pytest.mark.slow
def test_settings_already_measured_are_not_measured_again(tmp_path):
    """A repeat of a measured candidate is PRUNED naming the trial; no server starts for it."""
    from model_optimizer.optimizer.bench.client import ClientConfig
    from model_optimizer.optimizer.bench.load import LoadConfig
    from model_optimizer.optimizer.bench.workloads import WorkloadConfig
    from model_optimizer.optimizer.tune.trial import TrialSetup

    setup = TrialSetup(None, ClientConfig(), WorkloadConfig(), LoadConfig(num_requests=1), server_cmd="false")
    study = open_study(tmp_path, seed=0, resume=False)
    study.enqueue_trial({"max_num_seqs": 4})
    study.enqueue_trial({"max_num_seqs": 4})
    tuner = Tuner(study, SearchSpace([Knob("max_num_seqs", choices=[4])]), setup, tmp_path, max_skips_in_a_row=1)
    tuner.run(Budget(trials=2))
    first, second = study.trials
    assert first.state.name == "FAIL" and "exited with code 1" in first.user_attrs["error"]  # `false` is no server
    assert second.state.name == "PRUNED" and second.user_attrs["skip_reason"] == "same settings as trial 0"
    assert not (tmp_path / "trials" / "0001").exists()


@pytest.mark.slow
def test_a_grid_whose_points_all_fail_stops_without_drawing_repeats(tmp_path):
    """Every point of a grid fails (`false` is no server): the baseline's repeat is moot and the sampler
    has no new point, so the study ends with one trial a point, not with a run of PRUNED repeats."""
    from model_optimizer.optimizer.bench.client import ClientConfig
    from model_optimizer.optimizer.bench.load import LoadConfig
    from model_optimizer.optimizer.bench.workloads import WorkloadConfig
    from model_optimizer.optimizer.tune.samplers import enqueue_grid
    from model_optimizer.optimizer.tune.trial import TrialSetup

    setup = TrialSetup(None, ClientConfig(), WorkloadConfig(), LoadConfig(num_requests=1), server_cmd="false")
    space = SearchSpace([Knob("max_num_seqs", choices=[256, 4])])  # 256: the engine's default, the baseline
    study = open_study(tmp_path, seed=0, resume=False, sampler="grid", space=space)
    enqueue_grid(study, space)
    tuner = Tuner(study, space, setup, tmp_path, skip=False, repeat_baseline=True, queued_only=True)
    tuner.run(Budget(trials=3))
    assert [t.state.name for t in study.trials] == ["FAIL", "FAIL"]
    assert study.trials[0].user_attrs.get("baseline")


@pytest.mark.slow
def test_a_candidate_predicted_to_miss_is_measured_after_a_run_of_slo_skips(tmp_path):
    """The predictor rules candidates out; it must not end the study. After `max_skips_in_a_row` SLO-based
    skips the next candidate is measured anyway (here it fails: `false` is no server)."""
    predictor, setup = _small_model_predictor_and_setup(slo="tpot_p99=0.001ms")  # no candidate can meet it
    study = open_study(tmp_path, seed=0, resume=False)
    space = SearchSpace([Knob("max_num_seqs", choices=[1, 2, 4, 8, 16, 32])])
    tuner = Tuner(study, space, setup, tmp_path, predictor, max_skips_in_a_row=2)
    tuner.run(Budget(trials=1))
    states = [t.state.name for t in study.trials]
    assert states[:2] == ["PRUNED", "PRUNED"] and "predicted tpot" in study.trials[0].user_attrs["skip_reason"]
    assert states[2] == "FAIL" and "exited with code 1" in study.trials[2].user_attrs["error"]


def _small_model_predictor_and_setup(slo: str | None):
    """A predictor for a 2-layer model on a slow CPU, and trials whose server command is `false` (none starts)."""
    from model_optimizer.optimizer.bench.client import ClientConfig
    from model_optimizer.optimizer.bench.load import LoadConfig
    from model_optimizer.optimizer.bench.workloads import WorkloadConfig
    from model_optimizer.optimizer.tune.hardware import Hardware
    from model_optimizer.optimizer.tune.model_cost import model_cost
    from model_optimizer.optimizer.tune.predictor import Predictor
    from model_optimizer.optimizer.tune.trial import TrialSetup

    config = dict(
        num_hidden_layers=2,
        hidden_size=64,
        num_attention_heads=4,
        num_key_value_heads=2,
        intermediate_size=128,
        vocab_size=100,
        max_position_embeddings=512,
    )
    predictor = Predictor(model_cost(config), Hardware("cpu", 20.0, 0.2, 16.0, False, "test"))
    workload = WorkloadConfig(prompt_len="64", output_len="16")
    setup = TrialSetup(
        None, ClientConfig(), workload, LoadConfig(num_requests=2, concurrency=1), slo=slo, server_cmd="false"
    )
    return predictor, setup
