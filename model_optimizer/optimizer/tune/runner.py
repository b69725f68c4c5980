"""`mopt tune` from start to report: open the study, build the predictor, run the trials, write the outputs.

The study's settings (space, workload, load, SLO, server command) are stored beside it as tune.json,
so `--resume` continues exactly the study that was started. A run holds the folder's lock (folder.py)
from before it opens the study until its reports are written.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

from rich.console import Console

from model_optimizer.common.fileio import read_json
from model_optimizer.optimizer.bench.client import ClientConfig
from model_optimizer.optimizer.bench.load import LoadConfig
from model_optimizer.optimizer.bench.workloads import WorkloadConfig
from model_optimizer.optimizer.tune import report
from model_optimizer.optimizer.tune.budget import Budget, parse_duration
from model_optimizer.optimizer.tune.commands import template_argv, template_uses
from model_optimizer.optimizer.tune.compare import refitted_errors
from model_optimizer.optimizer.tune.folder import check_no_earlier_outputs, identity, study_lock
from model_optimizer.optimizer.tune.interrupts import interrupts_outside
from model_optimizer.optimizer.tune.model_cost import model_cost
from model_optimizer.optimizer.tune.predictor import Predictor
from model_optimizer.optimizer.tune.resume import requeue_interrupted, stop_leftover_servers
from model_optimizer.optimizer.tune.samplers import default_params, enqueue_grid, grid_size
from model_optimizer.optimizer.tune.space import SearchSpace
from model_optimizer.optimizer.tune.study import fail_running, open_study, save_setup
from model_optimizer.optimizer.tune.trial import TrialSetup
from model_optimizer.optimizer.tune.tuner import Tuner
from model_optimizer.runtime.models.model_config import read_config

STORED_KEYS = (
    "model",
    "space",
    "slo",
    "seed",
    "client",
    "workload",
    "load",
    "server_cmd",
    "ready_path",
    "ready_timeout",
    "trial_timeout",
)
"""What `tune` reads from tune.json without a default (cli/tune.py `_fresh` writes them all)."""


def budget_of(trials: int | None, time: str | None, sampler: str = "nsga2") -> Budget:
    if sampler == "grid" and trials is None and time is None:
        return Budget(None, float("inf"))  # every grid point: the study stops when the grid is done
    return Budget(trials, parse_duration(time) if time is not None else None)


def load_stored(output_dir: Path) -> dict:
    path = output_dir / "tune.json"
    if not path.is_file():
        raise ValueError(f"--resume: {path} does not exist; run without --resume to start a study there")
    stored = read_json(path)
    # a hand-edited or truncated file came out as a KeyError or AttributeError traceback
    if not isinstance(stored, dict):
        raise ValueError(
            f"--resume: {path} must hold a JSON object (what mopt tune wrote), got {type(stored).__name__}"
        )
    missing = [key for key in STORED_KEYS if key not in stored]
    if missing:
        raise ValueError(f"--resume: {path} lacks {', '.join(missing)}; it is not a tune.json that mopt tune wrote")
    for key in ("space", "client", "workload", "load"):
        if not isinstance(stored[key], dict):
            raise ValueError(f"--resume: {path}: {key} must be a JSON object, got {stored[key]!r}")
    try:
        SearchSpace.from_dict(stored["space"])
        trial_setup(stored)
    except (KeyError, TypeError) as exc:
        raise ValueError(f"--resume: {path} does not describe a study ({type(exc).__name__}: {exc})") from None
    return stored


def trial_setup(stored: dict) -> TrialSetup:
    load = dict(stored["load"])
    if isinstance(load.get("request_rate"), str):  # tune.json holds --request-rate inf as "inf" (folder.json_text)
        load["request_rate"] = _number(load["request_rate"])
    return TrialSetup(
        model=stored["model"],
        client=ClientConfig(**stored["client"]),
        workload=WorkloadConfig(**stored["workload"]),
        load=LoadConfig(**load),
        slo=stored["slo"],
        server_cmd=stored["server_cmd"],
        ready_path=stored["ready_path"],
        ready_timeout=stored["ready_timeout"],
        trial_timeout=stored["trial_timeout"],
        skip_first_wave=stored.get("skip_first_wave", False),  # a study stored before it measures as it did
    )


def _number(text: str) -> float:
    try:
        return float(text)
    except ValueError:
        raise TypeError(f"request_rate must be a number, got {text!r}") from None


def check_template(stored: dict, space: SearchSpace) -> None:
    """A --server-cmd must fill in, and must pass every searched knob on (else the knob changes nothing)."""
    template = stored["server_cmd"]
    if not template:
        return
    first = space.settings({k.name: k.choices[0] if k.choices else k.low for k in space.knobs})
    template_argv(template, stored["model"], first, 8000)
    used = template_uses(template)
    if {"flags", "vllm_flags"} & used:
        return
    unused = [k.name for k in space.knobs if k.name not in used]
    if unused:
        raise ValueError(
            f"--server-cmd does not pass on searched knob(s) {', '.join(unused)}: add {{NAME}} "
            "placeholders or {flags}, narrow the space with --space, or hold them with --set NAME=VALUE"
        )


def make_predictor(stored: dict, space: SearchSpace) -> tuple[Predictor | None, str]:
    """The analytic model for the study's model and hardware, or None with the reason."""
    if not stored.get("predict", True):
        return None, "prediction off (--no-predict)"
    from model_optimizer.assets import REFERENCE_MODEL_DIR
    from model_optimizer.optimizer.tune.hardware import detect_hardware
    from model_optimizer.runtime.hub import resolve_model

    try:  # a Hub id: the snapshot the trials' servers will load too
        folder = resolve_model(stored["model"]) if stored["model"] else Path(REFERENCE_MODEL_DIR)
    except (OSError, ValueError) as exc:
        return None, f"no predictor: {exc}"
    config_path = folder / "config.json"
    if not config_path.is_file():
        return None, f"no predictor: {config_path} not found"
    dtype = space.fixed.get("dtype")
    config = read_config(folder)  # an image-and-text checkpoint: its language model's settings
    hardware = detect_hardware(stored.get("gpu"), stored.get("hardware"))
    if dtype in (None, "auto") and not hardware.is_gpu:
        dtype = cpu_dtype(config)
    cost = model_cost(config, None if dtype in (None, "auto") else str(dtype))
    return Predictor(cost, hardware, config=config), f"predictor: {hardware.name} ({hardware.source})"


def cpu_dtype(config: dict) -> str:
    """What `--dtype auto` runs this checkpoint in on this CPU (the loader's one rule)."""
    import torch

    from model_optimizer.runtime.models.loader import resolve_dtype
    from model_optimizer.runtime.models.model_config import DecoderArgs

    return str(resolve_dtype("auto", DecoderArgs.from_dict(config), torch.device("cpu"))).removeprefix("torch.")


def tune(stored: dict, output_dir: Path, budget: Budget, prefer: str, resume: bool, console: Console) -> int:
    space = SearchSpace.from_dict(stored["space"])
    check_template(stored, space)
    output_dir.mkdir(parents=True, exist_ok=True)
    with study_lock(output_dir):  # one run per folder, from before the study opens until the reports are written
        if not resume:
            check_no_earlier_outputs(output_dir)
        predictor, note = make_predictor(stored, space)
        study = _open(stored, output_dir, resume, space, budget, console)
        console.print(f"study {output_dir / 'study.db'}: {len(study.trials)} trials so far; {note}")
        _print_space(console, stored, space)
        tuner = _tuner(stored, study, space, output_dir, predictor, console)
        interrupted = _run(tuner, budget)
        summary = _summary(stored, study, tuner, predictor, prefer)
        report.write_outputs(output_dir, summary, study)
    _print_summary(console, summary, output_dir, prefer)
    if interrupted:
        console.print(f"interrupted: the study is saved; continue it with mopt tune --resume --output-dir {output_dir}")
        return 130
    return 0 if summary["best"] else 1


def _open(stored: dict, output_dir: Path, resume: bool, space: SearchSpace, budget: Budget, console: Console):
    """The study, its interrupted trials' servers stopped and their settings queued again (resume.py), the
    grid's points queued and its budget set, tune.json written. A new study whose setup fails takes its
    study.db with it: the folder is left as it was, not holding a study that neither --resume (no tune.json)
    nor a new run could use."""
    db = output_dir / "study.db"
    created = not resume and not db.exists()
    try:
        return _set_up(stored, output_dir, resume, space, budget, console)
    except BaseException:
        if created:
            for path in (db, db.with_name(db.name + "-journal")):
                path.unlink(missing_ok=True)
        raise


def _set_up(stored: dict, output_dir: Path, resume: bool, space: SearchSpace, budget: Budget, console: Console):
    sampler = stored.get("sampler", "nsga2")
    study = open_study(output_dir, stored["seed"], resume, sampler, space, identity(stored))
    if resume:
        stopped = stop_leftover_servers(study, output_dir)
        if stopped:
            console.print(f"stopped the server(s) that interrupted trial(s) {_numbers(stopped)} left running")
        requeued = requeue_interrupted(study)
        if requeued:
            console.print(f"interrupted trial(s) {_numbers(requeued)}: measuring their settings again")
    if sampler == "grid":
        if not study.trials:
            enqueue_grid(study, space)
        # every point once, and the defaults' point again when asked to and the grid holds it
        repeat = int(bool(stored.get("repeat_baseline")) and default_params(space) is not None)
        most = grid_size(space) + repeat
        budget.trials = min(budget.trials or most, most)
    save_setup(output_dir, stored)
    return study


def _numbers(numbers: list[int]) -> str:
    return ", ".join(map(str, numbers))


def _print_space(console: Console, stored: dict, space: SearchSpace) -> None:
    console.print(
        "knobs: "
        + ", ".join(f"{k.name} {k.describe()}" for k in space.knobs)
        + (f"; fixed: {json.dumps(space.fixed)}" if space.fixed else "")
    )
    if stored.get("space_notes"):
        console.print("the trials run on the CPU; not searched: " + "; ".join(stored["space_notes"]))


def _tuner(stored: dict, study, space: SearchSpace, output_dir: Path, predictor, console: Console) -> Tuner:
    """The study's Tuner, the baseline queued for a new study (not for a grid, which queues its own)."""
    sampler = stored.get("sampler", "nsga2")
    tuner = Tuner(
        study,
        space,
        trial_setup(stored),
        output_dir,
        predictor,
        on_trial=lambda row: _print_trial(console, row),
        skip=sampler != "grid",
        guided=sampler != "grid" and stored.get("guided", True),
        repeat_baseline=stored.get("repeat_baseline", False),
        queued_only=sampler == "grid",
    )
    if sampler != "grid" and stored.get("baseline", True) and not study.trials and not tuner.enqueue_defaults():
        console.print("no baseline trial: a default setting lies outside the searched space")
    return tuner


def _run(tuner: Tuner, budget: Budget) -> bool:
    """Run the trials; True when a signal stopped them (the trial in progress is then marked interrupted)."""
    with interrupts_outside(tuner.study._storage):  # SIGTERM (`timeout`, `kill`) and SIGHUP reap as Ctrl-C does
        try:
            tuner.run(budget)
        except KeyboardInterrupt:
            fail_running(tuner.study, "interrupted (Ctrl-C, SIGTERM or SIGHUP)")
            return True
    return False


def _summary(stored: dict, study, tuner: Tuner, predictor: Predictor | None, prefer: str) -> dict:
    summary = report.build_summary(report.study_rows(study), prefer, stored["model"], stored)
    if predictor is not None:
        tuner._refit()  # with every trial the study now holds
        summary["predictor"] = {
            "hardware": dataclasses.asdict(predictor.hardware),
            "fit": predictor.fit,
            "memory_offset_gib": predictor.memory_offset_gib,
            "num_fitted": predictor.num_fitted,
            "refitted_error": refitted_errors(predictor, tuner.measured_pairs()),
        }
    return summary


def _print_summary(console: Console, summary: dict, output_dir: Path, prefer: str) -> None:
    if summary["best"]:
        console.print(report.pareto_table(summary))
        console.print(f"best ({prefer}): trial {summary['best']['number']} -> {output_dir / 'best.yaml'}")
    else:
        console.print("[yellow]no trial completed: nothing to recommend[/]")
    console.print(f"noise: {summary['noise']['note']}")
    if summary.get("best"):
        console.print(f"against the defaults: {summary['ranking']['note']}")
    console.print(f"report: {output_dir / 'report.html'}")


def _print_trial(console: Console, row: dict) -> None:
    state = row["state"]
    m = row.get("measured") or {}
    if state == "COMPLETE":
        text = (
            f"goodput {m['goodput']:.3g} req/s, p99 TTFT {m['ttft_p99_ms'] or 0:.1f} ms, p99 TPOT "
            f"{m['tpot_p99_ms'] or 0:.1f} ms, cold start {m['cold_start_s']:.1f} s"
        )
    else:
        text = row.get("error") or row.get("skip_reason") or ""
    settings = " ".join(f"{k}={v}" for k, v in (row.get("settings") or {}).items())
    console.print(f"trial {row['number']} {state}: {settings}: {text}", markup=False, highlight=False)
