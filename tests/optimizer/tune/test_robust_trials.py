"""Trial measurements made robust against start-up effects: the warm-up (sent, not counted), the closed
loop's first wave left out of the figures, and the baseline measured twice for a noise estimate. Real
`mopt serve` subprocesses and a real SQLite file; asserts on counts and records, never on speed."""

from __future__ import annotations

import json
from pathlib import Path

import optuna
import pytest

from model_optimizer.cli.main import main
from model_optimizer.optimizer.bench.load import LoadConfig
from model_optimizer.optimizer.tune.noise import noise_summary
from model_optimizer.optimizer.tune.steady import default_warmups, steady_summary
from model_optimizer.optimizer.tune.study import STUDY_NAME

FIXED = ["--set", "max_model_len=256", "--set", "num_kv_blocks=32", "--set", "log_level=warning"]
LOAD = ["--prompt-len", "8", "--output-len", "4", "--ready-timeout", "180", "--trial-timeout", "180"]


def tune_argv(model: Path, out: Path, space: str, tmp_path: Path, *extra: str) -> list[str]:
    file = tmp_path / f"space-{out.name}.yaml"
    file.write_text(space)
    base = ["tune", "--model", str(model), "--output-dir", str(out), "--space", str(file), "--seed", "0"]
    return [*base, "--slo", "ttft_p99=60s,tpot_p99=60s", *FIXED, *LOAD, *extra]


def bench_run(out: Path, number: int) -> dict:
    runs = [p for p in (out / "trials" / f"{number:04d}" / "bench").glob("*.json")]
    runs = [json.loads(p.read_text()) for p in runs]
    runs = [r for r in runs if "requests" in r and "plan" in r]
    assert len(runs) == 1, "one bench run per trial"
    return runs[0]


@pytest.mark.slow
def test_warmup_is_sent_not_counted_and_the_first_wave_is_left_out(tiny_model, tmp_path):
    out = tmp_path / "warm"
    argv = tune_argv(tiny_model("qwen3"), out, "max_num_seqs: [2, 4]\n", tmp_path)
    argv += ["--num-warmups", "5", "--num-requests", "6", "--concurrency", "2", "--trials", "1"]
    assert main(argv) == 0
    run = bench_run(out, 0)
    # the bench sent the 5 warm-up requests, kept only their count, and recorded the 6 measured ones
    assert run["warmup"] == {"num_requests": 5, "num_ok": 5, "concurrency": 2, "errors": {}}
    assert [r["index"] for r in run["requests"]] == list(range(6))
    # the server saw them: 5 requests had finished when the measured run began, 6 more during it
    finished = run["server_metrics"]["counters"]["request_success_total"]
    assert finished["before"] == 5 and finished["delta"] == 6
    assert run["summary"]["num_requests"] == 6  # the bench's own figures count the whole measured run
    m = json.loads((out / "results.json").read_text())["trials"][0]["measured"]
    # the tuner's figures leave out the closed loop's first wave (2 clients) and name what they count
    assert m["warmup_requests"] == 5 and m["first_wave_skipped"] == 2 and m["counted_requests"] == 4
    stored = json.loads((out / "tune.json").read_text())
    assert stored["load"]["num_warmups"] == 5 and stored["skip_first_wave"] is True


@pytest.mark.slow
def test_repeated_baseline_reports_its_spread_and_the_study_resumes(tiny_model, tmp_path, capsys):
    """The defaults (max_num_seqs 256) lie in this space: trial 0 is the baseline, the budget's last trial
    its repeat (not skipped as a twin); results.json holds the spread. A resume adds trials, not repeats."""
    out = tmp_path / "noise"
    argv = tune_argv(tiny_model("qwen3"), out, "max_num_seqs: [2, 256]\n", tmp_path)
    argv += ["--num-warmups", "2", "--num-requests", "4", "--concurrency", "2", "--repeat-baseline", "--trials", "2"]
    assert main(argv) == 0
    results = json.loads((out / "results.json").read_text())
    first, second = results["trials"]
    assert first.get("baseline") and second.get("baseline_repeat") and second["state"] == "COMPLETE"
    assert first["settings"] == second["settings"] and first["settings"]["max_num_seqs"] == 256
    noise = results["noise"]
    assert noise["baseline_trials"] == [0, 1]
    goodput = noise["figures"]["goodput"]
    values = [first["measured"]["goodput"], second["measured"]["goodput"]]
    assert goodput["values"] == values and goodput["spread"] == pytest.approx(max(values) - min(values))
    assert "noise:" in capsys.readouterr().out
    # resume with a larger budget: one more (new) candidate, no second repeat, the estimate kept
    assert main(["tune", "--resume", "--output-dir", str(out), "--trials", "3"]) == 0
    trials = optuna.load_study(study_name=STUDY_NAME, storage=f"sqlite:///{out / 'study.db'}").trials
    assert sum(t.state.name in ("COMPLETE", "FAIL") for t in trials) == 3
    assert sum(bool(t.user_attrs.get("baseline_repeat")) for t in trials) == 1
    measured = [t for t in trials if t.state.name == "COMPLETE"]
    assert measured[-1].user_attrs["settings"]["max_num_seqs"] == 2
    results = json.loads((out / "results.json").read_text())
    assert results["noise"]["baseline_trials"] == [0, 1]
    assert results["trials"][-1]["measured"]["warmup_requests"] == 2  # the stored load, warm-up included


def _run(ttfts: list[float], concurrency: int | None, mode: str = "closed") -> dict:
    requests = [
        {
            "index": i,
            "prompt_len": 8,
            "output_len_requested": 4,
            "send": float(i),
            "end": float(i) + ttft + 0.3,
            "chunk_times": [float(i) + ttft + 0.1 * k for k in range(4)],
            "output_tokens": 4,
            "prompt_tokens": 8,
            "error": None,
        }
        for i, ttft in enumerate(ttfts)
    ]
    return {"plan": {"mode": mode, "concurrency": concurrency}, "requests": requests, "summary": {"own": True}}


def test_first_wave_is_chosen_by_index_and_only_for_closed_loops():
    """The burst's slow first TTFTs (requests 0-2 of 3 clients) decide the p99 unless left out."""
    run = _run([2.0, 2.5, 3.0, 0.1, 0.1, 0.1, 0.1, 0.1], concurrency=3)
    summary, skipped = steady_summary(run, "ttft_p99=1s", skip_first_wave=True)
    assert skipped == 3 and summary["num_requests"] == 5 and summary["ttft_ms"]["max"] == pytest.approx(100.0)
    assert summary["slo_met"] is True and summary["num_good"] == 5
    assert steady_summary(run, "ttft_p99=1s", skip_first_wave=True)[0] == summary  # deterministic
    assert steady_summary(run, "ttft_p99=1s", skip_first_wave=False) == ({"own": True}, 0)
    # an open loop has no start-up burst; a run no longer than its first wave is all start-up: kept whole
    assert steady_summary(_run([2.0] * 8, None, "poisson"), None, True) == ({"own": True}, 0)
    assert steady_summary(_run([2.0] * 3, concurrency=3), None, True) == ({"own": True}, 0)


def test_default_warmups_and_bad_values():
    assert default_warmups(LoadConfig(concurrency=64)) == 128
    assert default_warmups(LoadConfig(concurrency=4)) == 32
    assert default_warmups(LoadConfig(load_mode="sweep", sweep_max_concurrency=40)) == 80
    assert default_warmups(LoadConfig(request_rate=5.0)) == 32
    with pytest.raises(ValueError, match="num_warmups must be >= 0"):
        LoadConfig(num_warmups=-1)


def _row(number: int, goodput: float, **attrs) -> dict:
    return {"number": number, "state": "COMPLETE", "measured": {"goodput": goodput, "ttft_p99_ms": 1.0}, **attrs}


def test_noise_verdict_compares_the_gain_with_the_baselines_spread():
    rows = [_row(0, 20.0, baseline=True), _row(1, 22.0), _row(2, 24.0, baseline_repeat=True)]
    within = noise_summary(rows, rows[1])
    assert within["baseline_trials"] == [0, 2] and within["figures"]["goodput"]["spread"] == 4.0
    assert within["best_minus_baseline"] == 0.0 and within["within_noise"] is True
    assert "within the noise" in within["note"]
    rows[1]["measured"]["goodput"] = 30.0
    beyond = noise_summary(rows, rows[1])
    assert beyond["within_noise"] is False and beyond["best_minus_baseline"] == 8.0
    once = noise_summary(rows[:2], rows[1])
    assert "figures" not in once and "--repeat-baseline" in once["note"]


@pytest.mark.slow
def test_the_repeat_is_the_last_trial_of_either_budget(tmp_path):
    """--trials: the repeat takes the last slot; --time: it runs once under two baseline trials' time is
    left. It is measured although its settings were (no twin skip); `false` is no server, so it fails."""
    from optuna.distributions import CategoricalDistribution
    from optuna.trial import TrialState, create_trial

    from model_optimizer.optimizer.bench.client import ClientConfig
    from model_optimizer.optimizer.bench.workloads import WorkloadConfig
    from model_optimizer.optimizer.tune.budget import Budget
    from model_optimizer.optimizer.tune.space import Knob, SearchSpace
    from model_optimizer.optimizer.tune.study import open_study
    from model_optimizer.optimizer.tune.trial import TrialSetup
    from model_optimizer.optimizer.tune.tuner import Tuner

    setup = TrialSetup(None, ClientConfig(), WorkloadConfig(), LoadConfig(num_requests=1), server_cmd="false")
    study = open_study(tmp_path, seed=0, resume=False)
    settings = {"max_num_seqs": 256}
    study.add_trial(
        create_trial(
            params=settings,
            distributions={"max_num_seqs": CategoricalDistribution([4, 256])},
            values=[1.0] * 5,
            user_attrs={"baseline": True, "settings": settings, "measured": {"duration_s": 100.0}},
            state=TrialState.COMPLETE,
        )
    )
    space = SearchSpace([Knob("max_num_seqs", choices=[4, 256])])
    tuner = Tuner(study, space, setup, tmp_path, repeat_baseline=True)
    assert tuner._repeat_due(Budget(time_s=1000.0), elapsed_s=0.0) is False
    assert tuner._repeat_due(Budget(time_s=1000.0), elapsed_s=850.0) is True
    assert tuner._repeat_due(Budget(trials=3), elapsed_s=0.0) is False  # two slots left: not yet
    assert tuner._repeat_due(Budget(trials=2), elapsed_s=0.0) is True
    assert Tuner(study, space, setup, tmp_path)._repeat_due(Budget(trials=2), 0.0) is False  # not asked for
    tuner.run(Budget(trials=2))
    repeat = study.trials[1]
    assert repeat.user_attrs.get("baseline_repeat") is True and repeat.params == settings
    assert repeat.state.name == "FAIL" and "exited with code 1" in repeat.user_attrs["error"]
    assert tuner._repeat_due(Budget(trials=5), elapsed_s=0.0) is False  # once per study


def test_saved_records_keep_tokens_per_chunk():
    """A merged chunk's token count survives the trip through a saved run, so the tuner's ITL matches bench's."""
    from model_optimizer.optimizer.bench.client import RequestRecord
    from model_optimizer.optimizer.bench.metrics import itls
    from model_optimizer.optimizer.bench.report import record_to_dict
    from model_optimizer.optimizer.tune.steady import record_from_dict

    rec = RequestRecord(index=0, prompt_len=4, output_len_requested=5, send=0.0, end=1.0)
    rec.chunk_times, rec.chunk_tokens, rec.output_tokens = [0.1, 0.4, 0.5], [1, 3, 1], 5
    back = record_from_dict(record_to_dict(rec))
    assert back.chunk_tokens == [1, 3, 1]
    assert itls(back) == itls(rec) and len(itls(rec)) == 4
