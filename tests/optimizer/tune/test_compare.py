"""The study-vs-grid summary over real results.json files: goodputs, trial counts, the trials the study
needed to reach 95% of the grid's best, partial or missing folders, and the predictor's error."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from model_optimizer.optimizer.tune.compare import compare, main

REPO = Path(__file__).resolve().parents[3]
SETUP = {"slo": "tpot_p99=20ms", "load": {"concurrency": 64, "num_requests": 512}}
DEFAULTS = {"max_num_seqs": 256, "max_num_batched_tokens": 8192}


def _trial(number: int, goodput: float | None, state: str = "COMPLETE", **extra) -> dict:
    settings = extra.pop("settings", {"max_num_seqs": 256, "max_num_batched_tokens": 1024 * (number + 1)})
    measured = {"ok": state == "COMPLETE", "goodput": goodput}
    return {"number": number, "state": state, "settings": settings, "measured": measured, **extra}


def _write(folder: Path, trials: list[dict]) -> Path:
    folder.mkdir(parents=True)
    (folder / "results.json").write_text(json.dumps({"setup": SETUP, "trials": trials}))
    return folder


def test_study_against_grid(tmp_path):
    study = _write(
        tmp_path / "study",
        [
            _trial(0, 10.0, baseline=True, settings=DEFAULTS),
            _trial(1, None, state="PRUNED"),
            _trial(2, 12.0, picked_by="predictor"),
            _trial(3, 0.0, state="FAIL", error="out of memory"),
        ],
    )
    grid = _write(tmp_path / "grid", [_trial(i, g) for i, g in enumerate([5.0, 12.5, 8.0])])
    s = compare(study, grid)
    assert (s["defaults_goodput"], s["study_best_goodput"], s["grid_best_goodput"]) == (10.0, 12.0, 12.5)
    assert (s["study_measured_trials"], s["study_skipped_by_predictor"], s["grid_trials"]) == (3, 1, 3)
    assert s["study_trials_to_95pct_of_grid_best"] == 2  # 12.0 >= 0.95 x 12.5, the second measured trial
    assert s["study_vs_grid"] == pytest.approx(0.96) and s["study_vs_defaults"] == pytest.approx(1.2)
    assert [r["picked_by"] for r in s["study_trials"]] == ["baseline", "predictor", "sampler"]
    assert s["study_trials"][2]["error"] == "out of memory"


def test_missing_grid_still_writes_a_summary(tmp_path):
    study = _write(tmp_path / "study", [_trial(0, 10.0, baseline=True)])
    out = tmp_path / "summary.json"
    assert main(["--study", str(study), "--grid", str(tmp_path / "none"), "--output", str(out)]) == 0
    s = json.loads(out.read_text())
    assert s["grid_best_goodput"] is None and s["study_vs_grid"] is None and s["grid_trials"] == 0
    assert s["defaults_goodput"] == 10.0 and "predictor" not in s


def test_predictor_error_on_the_recorded_h200_trials(tmp_path):
    """The recorded H200 study as the study, no grid: leave-one-out over its five measured trials."""
    trials = json.loads((REPO / "tests/optimizer/tune/h200_trials.json").read_text())["trials"]
    for t in trials:
        t["state"], t["measured"]["ok"] = "COMPLETE", True
    study = tmp_path / "study"
    study.mkdir()
    setup = {"load": {"concurrency": 64, "num_requests": 512}}
    (study / "results.json").write_text(json.dumps({"setup": setup, "trials": trials}))
    out = tmp_path / "summary.json"
    argv = ["--study", str(study), "--grid", str(tmp_path / "none"), "--output", str(out)]
    config = ["--config", str(REPO / "benchmarks/configs/qwen3-0.6b/config.json")]
    hardware = ["--hardware", str(REPO / "benchmarks/results/doctor_h200.json")]
    assert main(argv + config + hardware) == 0
    loo = json.loads(out.read_text())["predictor"]["leave_one_out"]
    assert loo["num_trials"] == 5
    assert loo["tpot_mape_pct"] < 15 and loo["throughput_mape_pct"] < 15


def test_defaults_in_a_grid_with_fixed_settings_and_the_defaults_noise(tmp_path):
    """The grid's point at the default knob values is found although every point also holds --set settings
    (max_model_len 2048 is no engine default); the study's repeated baseline gives the noise verdict."""
    fixed = {"load_format": "dummy", "max_model_len": 2048}
    study = _write(
        tmp_path / "study",
        [
            _trial(0, 4.0, baseline=True, settings=DEFAULTS | fixed),
            _trial(1, 6.0, picked_by="predictor"),
            _trial(2, 7.0, baseline_repeat=True, settings=DEFAULTS | fixed),
        ],
    )
    grid_dir = tmp_path / "grid"
    grid_dir.mkdir()
    grid = [_trial(0, 9.0, settings={"max_num_seqs": 64, "max_num_batched_tokens": 8192} | fixed)]
    grid.append(_trial(1, 24.0, settings=DEFAULTS | fixed))
    setup = SETUP | {"space": {"knobs": [], "fixed": fixed}}
    (grid_dir / "results.json").write_text(json.dumps({"setup": setup, "trials": grid}))
    s = compare(study, grid_dir)
    assert s["defaults_goodput_in_grid"] == 24.0
    noise = s["defaults_noise"]
    assert noise["baseline_trials"] == [0, 2] and noise["figures"]["goodput"]["spread"] == 3.0
    # the best study trial is the defaults' own repeat: no gain to judge
    assert "within_noise" not in noise and noise["note"] == "baseline goodput 4 and 7 req/s over 2 measurements"
    assert [r["picked_by"] for r in s["study_trials"]] == ["baseline", "predictor", "baseline repeat"]
