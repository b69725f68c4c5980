"""A study against a grid on the same workload: best goodput of each, the defaults', the trials each
needed, the spread of the defaults' repeated measurements (noise.py), and how well the predictor refitted on
the study's trials predicts the grid's (trials it never saw).

    python -m model_optimizer.optimizer.tune.compare --study OUT/study --grid OUT/grid --config config.json \
        [--hardware doctor.json] --output summary.json

Either folder may be missing or hold a partial study (a step that ran out of time): every figure that
cannot be computed is null, and the summary is still written.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from model_optimizer.common.fileio import atomic_write
from model_optimizer.optimizer.tune.model_cost import model_cost
from model_optimizer.optimizer.tune.noise import noise_summary
from model_optimizer.optimizer.tune.predictor import Predictor, Workload, mape
from model_optimizer.runtime.models.model_config import text_model_config

METRICS = (("tpot", "tpot_ms", "tpot_p99_ms"), ("throughput", "output_throughput", "output_throughput"))
TTFT = ("ttft", "ttft_ms", "ttft_p99_ms")


def read_trials(folder: Path) -> tuple[list[dict], dict]:
    """(trials, setup) of a study's results.json; ([], {}) when there is none."""
    path = folder / "results.json"
    if not path.is_file():
        return [], {}
    data = json.loads(path.read_text())
    return data.get("trials", []), data.get("setup", {})


def goodput(trial: dict) -> float:
    return float((trial.get("measured") or {}).get("goodput") or 0.0) if trial.get("state") == "COMPLETE" else 0.0


def measured(trials: list[dict]) -> list[dict]:
    return [t for t in trials if t.get("state") in ("COMPLETE", "FAIL")]


def is_default(settings: dict, fixed: dict | None = None) -> bool:
    """Whether the searched knobs hold the engine's defaults; settings `fixed` for every trial (the
    study's --set) are the same at every point and are not compared."""
    from model_optimizer.runtime.config import EngineConfig

    defaults = EngineConfig()
    held = set(fixed or ()) | {"load_format"}
    return all(getattr(defaults, k) == v for k, v in settings.items() if hasattr(defaults, k) and k not in held)


def errors(fitted: Predictor | None, rows: list, make, loo: bool = False) -> dict:
    """MAPE (percent) of TPOT, throughput and TTFT over (ideal prediction, measured) rows: by `fitted`, or
    with `loo` each row by a predictor `make()` refits on the other rows."""
    got: dict = {name: [] for name, _, _ in (*METRICS, TTFT)}
    for i, (ideal, m) in enumerate(rows):
        p = fitted
        if loo:
            p = make()
            p.refit(rows[:i] + rows[i + 1 :])
        pred = p.correct(ideal)
        for name, ours, theirs in (*METRICS, TTFT):
            got[name].append((getattr(pred, ours), m.get(theirs)))
    return {f"{name}_mape_pct": mape(v) for name, v in got.items()} | {"num_trials": len(rows)}


def refitted_errors(predictor: Predictor, rows: list) -> dict:
    """The end-of-study model's error on the trials it was fitted to, and each trial predicted from the
    others (leave-one-out: what it would say of a trial it has not seen)."""
    import dataclasses

    def make() -> Predictor:
        return dataclasses.replace(predictor, fit={}, memory_offset_gib=0.0, num_fitted=0)

    out = {"in_sample": errors(predictor, rows, make)}
    if len(rows) >= 2:
        out["leave_one_out"] = errors(None, rows, make, loo=True)
    return out


def predictor_check(study: list[dict], grid: list[dict], setup: dict, make) -> dict:
    """MAPE of the predictor refitted on the study's trials, on the grid's trials (out of sample), and
    leave-one-out over every distinct measured trial of both."""

    def pairs(trials: list[dict]) -> list:
        load = setup.get("load", {})
        out = []
        for t in trials:
            m = t.get("measured") or {}
            if t.get("state") != "COMPLETE" or not m.get("ok"):
                continue
            work = Workload(
                m["mean_prompt_len"],
                m["mean_output_len"],
                concurrency=float(load.get("concurrency") or 1),
                num_requests=load.get("num_requests"),
                burst_measured=not setup.get("skip_first_wave", False),
            )
            out.append((make().ideal(t["settings"], work), m))
        return out

    train, test = pairs(study), pairs(grid)
    result: dict = {}
    if train and test:
        fitted = make()
        fitted.refit(train)
        result["study_fit_on_grid"] = errors(fitted, test, make)
    seen, distinct = set(), []
    for row in train + test:
        key = json.dumps(row[0].features, sort_keys=True)
        if key not in seen:
            seen.add(key)
            distinct.append(row)
    if len(distinct) >= 2:
        result["leave_one_out"] = errors(None, distinct, make, loo=True)
    return result


def compare(study_dir: Path, grid_dir: Path, make=None) -> dict:
    """The summary; `make` builds a fresh Predictor (None: no predictor figures)."""
    study, setup = read_trials(study_dir)
    grid, grid_setup = read_trials(grid_dir)
    grid_best = max(map(goodput, grid), default=None)
    study_best = max(map(goodput, study), default=None)
    baseline = next((goodput(t) for t in study if t.get("baseline")), None)
    grid_fixed = (grid_setup.get("space") or {}).get("fixed")
    grid_defaults = next((goodput(t) for t in grid if is_default(t.get("settings") or {}, grid_fixed)), None)
    reach = None
    if grid_best:
        reach = next((i + 1 for i, t in enumerate(measured(study)) if goodput(t) >= 0.95 * grid_best), None)
    best = max(study, key=goodput, default=None)
    summary = {
        "slo": setup.get("slo") or grid_setup.get("slo"),
        "load": setup.get("load") or grid_setup.get("load"),
        "defaults_goodput": baseline,
        "defaults_goodput_in_grid": grid_defaults,
        "study_best_goodput": study_best,
        "study_best_settings": best.get("settings") if best else None,
        "grid_best_goodput": grid_best,
        "grid_best_settings": max(grid, key=goodput)["settings"] if grid else None,
        "study_measured_trials": len(measured(study)),
        "study_skipped_by_predictor": sum(t.get("state") == "PRUNED" for t in study),
        "grid_trials": len(measured(grid)),
        "study_trials_to_95pct_of_grid_best": reach,
        "study_vs_grid": study_best / grid_best if study_best is not None and grid_best else None,
        "study_vs_defaults": study_best / baseline if study_best is not None and baseline else None,
        "defaults_noise": noise_summary(study, best if best is not None and goodput(best) > 0 else None),
        "study_trials": [_row(t) for t in study if t.get("state") != "PRUNED"],
        "grid": [_row(t) for t in grid],
    }
    if make is not None and (study or grid):
        summary["predictor"] = predictor_check(study, grid, setup or grid_setup, make)
    return summary


def _row(t: dict) -> dict:
    m = t.get("measured") or {}
    keys = ("goodput", "output_throughput", "tpot_p99_ms", "ttft_p99_ms", "cold_start_s", "memory_gib")
    return {
        "number": t.get("number"),
        "state": t.get("state"),
        "picked_by": _picked_by(t),
        "settings": {k: v for k, v in (t.get("settings") or {}).items() if k not in ("load_format", "log_level")},
        "measured": {k: m.get(k) for k in keys},
        "predicted": {k: (t.get("predicted") or {}).get(k) for k in ("tpot_ms", "ttft_ms", "output_throughput")},
        "error": t.get("error"),
    }


def _picked_by(t: dict) -> str:
    if t.get("baseline"):
        return "baseline"
    return "baseline repeat" if t.get("baseline_repeat") else t.get("picked_by", "sampler")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m model_optimizer.optimizer.tune.compare", description=__doc__.split("\n")[0]
    )
    parser.add_argument("--study", required=True, type=Path)
    parser.add_argument("--grid", required=True, type=Path)
    parser.add_argument("--config", type=Path, help="the model's config.json, for the predictor figures")
    parser.add_argument("--hardware", help="`mopt doctor --bench --json` output (default: the datasheet)")
    parser.add_argument("--output", required=True, type=Path)
    args = parser.parse_args(argv)
    make = None
    if args.config is not None:
        from model_optimizer.optimizer.tune.hardware import detect_hardware

        config = text_model_config(json.loads(args.config.read_text()), args.config)
        hardware = detect_hardware(None, args.hardware)
        cost = model_cost(config)

        def make() -> Predictor:
            return Predictor(cost, hardware, config=config)

    summary = compare(args.study, args.grid, make)
    args.output.parent.mkdir(parents=True, exist_ok=True)
    atomic_write(args.output, json.dumps(summary, indent=2, default=str) + "\n")
    print(json.dumps({k: v for k, v in summary.items() if k not in ("study_trials", "grid", "load")}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
