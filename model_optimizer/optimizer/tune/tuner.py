"""The search: trials run into an optuna multi-objective study (study.py), one measured server per trial.

Each candidate is first predicted (predictor.py); one that cannot fit or would miss an SLO by a wide
margin is recorded as PRUNED with the reason and never started. The others are measured
(trial.py) and told to optuna as five objectives with the SLOs as constraints (objectives.py). A trial
that fails is recorded as FAIL with its error and the search goes on. Every trial is committed to
`study.db` as it ends, so Ctrl-C or a crash loses at most the trial in progress, and `--resume`
continues the same study, measuring that trial's settings again (resume.py): an interrupted trial is
not one of the budget's.
"""

from __future__ import annotations

import math
import signal
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from model_optimizer.optimizer.bench.lengths import parse_length
from model_optimizer.optimizer.bench.metrics import parse_slo
from model_optimizer.optimizer.bench.workloads import DEFAULT_OUTPUT_LEN
from model_optimizer.optimizer.tune.budget import Budget
from model_optimizer.optimizer.tune.objectives import objective_values, slo_violation
from model_optimizer.optimizer.tune.predictor import Prediction, Predictor, Workload
from model_optimizer.optimizer.tune.resume import is_interrupted
from model_optimizer.optimizer.tune.samplers import default_params
from model_optimizer.optimizer.tune.space import SearchSpace, sample
from model_optimizer.optimizer.tune.trial import TrialResult, TrialSetup, run_trial

MAX_SKIPS_IN_A_ROW = 20
"""Candidates predicted out in a row before the study measures one anyway (or, when none fits, stops)."""
EXPLORE_EVERY = 4
"""With guidance, every EXPLORE_EVERY-th measured trial is the sampler's draw, so a wrong model cannot
keep the study away from a region it misjudges."""
CHOSEN_ATTRS = ("baseline", "baseline_repeat", "picked_by", "rerun_of")
"""A trial queued with one of these is measured unless it cannot fit (never skipped for a predicted SLO miss)."""


def workload_figures(setup: TrialSetup) -> Workload | None:
    """Mean prompt and output lengths and the load's concurrency or rate; None for files (measured later)."""
    w = setup.workload
    if w.dataset != "synthetic":
        return None
    rng = np.random.default_rng(w.seed)
    prompt = float(parse_length(w.prompt_len).sample(rng, 2000).mean())
    output = float(parse_length(w.output_len or DEFAULT_OUTPUT_LEN).sample(rng, 2000).mean())
    if w.num_prefix_groups:
        prompt += w.prefix_len * w.prefix_share_ratio
    return workload_of(setup, prompt, output)


def workload_of(setup: TrialSetup, prompt: float, output: float) -> Workload:
    """The predictor's workload: mean prompt and output lengths under the setup's load (closed loop,
    sweep or rate)."""
    load = setup.load
    if load.load_mode == "closed":
        return Workload(
            prompt,
            output,
            concurrency=float(load.concurrency or 1),
            num_requests=load.num_requests,
            burst_measured=not setup.skip_first_wave,
        )
    if load.load_mode == "sweep":
        return Workload(prompt, output, concurrency=float(load.sweep_max_concurrency))
    return Workload(prompt, output, request_rate=load.request_rate or math.inf, num_requests=load.num_requests)


@dataclass
class Tuner:
    """Runs trials into a study until the budget is spent."""

    study: object
    space: SearchSpace
    setup: TrialSetup
    output_dir: Path
    predictor: Predictor | None = None
    on_trial: Callable[[dict], None] = lambda row: None
    skip: bool = True
    """Skip candidates the predictor rules out (off for a grid, which measures every point)."""
    max_skips_in_a_row: int = MAX_SKIPS_IN_A_ROW
    guided: bool = False
    """Measure the predictor's best untried candidate next (guide.py) instead of the sampler's draw."""
    repeat_baseline: bool = False
    """Measure the default settings once more as the budget's last trial: the noise estimate (noise.py)."""
    queued_only: bool = False
    """Measure only queued trials (a grid: its points, and the baseline's repeat): once none waits, the
    study is done, even where failed points left the budget unspent (the sampler would only draw repeats)."""

    def __post_init__(self) -> None:
        slos = parse_slo(self.setup.slo)
        self.slos = slos
        self.load = workload_figures(self.setup)
        one_token = self.load is not None and self.load.output_len <= 1  # no TPOT: such a term is always met
        self.slo_ms = {
            s.metric: s.limit * 1e3 for s in slos if s.stat == "p99" and not (one_token and s.metric == "tpot")
        }
        self._refit()

    def enqueue_defaults(self) -> bool:
        """Measure the engine's default settings first: the baseline every other trial is compared with.
        False (nothing queued) when a default lies outside the searched space."""
        if self.study.trials:
            return False
        params = default_params(self.space)
        if params is None:
            return False
        self.study.enqueue_trial(params, user_attrs={"baseline": True})
        return True

    def _baseline_trial(self):
        """The baseline's measurement (an interrupted one is measured again, resume.py)."""
        trials = self.study.get_trials(deepcopy=False)
        return next((t for t in trials if t.user_attrs.get("baseline") and not is_interrupted(t)), None)

    def _repeat_due(self, budget: Budget, elapsed_s: float) -> bool:
        """Time for the baseline's repeat: asked for, not done yet, the baseline measured, and this the
        budget's last trial (--trials) or the last one the time left allows (--time: under two baseline
        trials' time remain). It is a trial of the budget, so the study spends no more than it was given."""
        if not self.repeat_baseline:
            return False
        from optuna.trial import TrialState

        trials = self.study.get_trials(deepcopy=False)
        if any(t.user_attrs.get("baseline_repeat") for t in trials):
            return False
        base = self._baseline_trial()
        if base is None or base.state != TrialState.COMPLETE:
            return False
        if self._waiting():
            return False
        if budget.trials is not None and self._measured() >= budget.trials - 1:
            return True
        took = (base.user_attrs.get("measured") or {}).get("duration_s") or 0.0
        return budget.time_s is not None and budget.time_s - elapsed_s < 2 * took

    def _enqueue_repeat(self) -> None:
        base = self._baseline_trial()
        self.study.enqueue_trial(dict(base.params), user_attrs={"baseline_repeat": True}, skip_if_exists=False)

    def run(self, budget: Budget) -> None:
        from optuna.trial import TrialState

        started = time.monotonic()
        skips, explore = 0, False
        while self._measured() < (budget.trials or math.inf):
            if budget.time_s is not None and time.monotonic() - started >= budget.time_s:
                break
            if self._repeat_due(budget, time.monotonic() - started):
                self._enqueue_repeat()
            if self.queued_only and not self._waiting():
                break
            trial = self._ask()
            try:
                row = self._one(trial, explore)
            except KeyboardInterrupt:  # wherever Ctrl-C lands, the trial is closed in the file, not left RUNNING
                trial.set_user_attr("error", "interrupted (Ctrl-C)")
                trial.set_user_attr("state", "FAIL")
                self.study.tell(trial, state=TrialState.FAIL)
                raise
            state = {"COMPLETE": TrialState.COMPLETE, "FAIL": TrialState.FAIL, "PRUNED": TrialState.PRUNED}[
                row["state"]
            ]
            self.study.tell(trial, row.get("values") if state == TrialState.COMPLETE else None, state=state)
            self.on_trial(row)
            skips, explore = (skips + 1 if state == TrialState.PRUNED else 0), False
            if skips >= self.max_skips_in_a_row:
                if row.get("skip_kind") != "slo":  # nothing left that fits, or only repeats: the space is spent
                    break
                # Every recent candidate is predicted to miss an SLO. The prediction is a model, not a
                # measurement: measure the next candidate anyway rather than let the model end the study.
                skips, explore = 0, True
            self._refit()

    def _one(self, trial, explore: bool = False) -> dict:
        """Sample, predict, measure one trial; record everything on it; return its row. With `explore`, a
        candidate predicted to miss an SLO is measured all the same (one that cannot fit is still skipped)."""
        row: dict = {"number": trial.number}
        try:
            settings = self.space.settings(sample(self.space.knobs, trial))
        except ValueError as exc:  # a combination the engine refuses (each value alone was checked)
            return self._record(trial, row | {"state": "FAIL", "error": f"impossible setting: {exc}"})
        row["settings"] = settings
        twin = None if trial.user_attrs.get("baseline_repeat") else self._measured_twin(settings)
        if twin is not None:  # a small space runs out of new points: a budget is better spent elsewhere
            row |= {"state": "PRUNED", "skip_reason": f"same settings as trial {twin}", "skip_kind": "repeat"}
            return self._record(trial, row)
        load = self.load or self._measured_load()
        if self.predictor is not None and load is not None:
            ideal = self.predictor.ideal(settings, load)
            pred = self.predictor.predict(settings, load)
            row["ideal"], row["predicted"] = ideal.to_dict(), pred.to_dict()
            reason = self.predictor.skip_reason(pred, self.slo_ms) if self.skip else None
            chosen = any(trial.user_attrs.get(k) is not None for k in CHOSEN_ATTRS)
            if reason and not ((explore or chosen) and pred.fits):  # a chosen trial is measured unless it cannot fit
                kind = "slo" if pred.fits else "fit"
                return self._record(trial, row | {"state": "PRUNED", "skip_reason": reason, "skip_kind": kind})
        trial.set_user_attr("settings", settings)
        result = run_trial(self.setup, settings, self.output_dir / "trials" / f"{trial.number:04d}")
        row["measured"] = result.to_dict()
        if not result.ok:
            return self._record(trial, row | {"state": "FAIL", "error": result.error})
        row["values"] = objective_values(result)
        row["constraints"] = self._constraints(result)
        return self._record(trial, row | {"state": "COMPLETE"})

    def _record(self, trial, row: dict) -> dict:
        for key in ("settings", "ideal", "predicted", "measured", "error", "skip_reason", "constraints", "state"):
            if key in row:
                trial.set_user_attr(key, row[key])
        if hasattr(trial, "set_constraint"):  # optuna 5; optuna 4 reads the "constraints" attribute instead
            for slo, value in zip(self.slos, row.get("constraints", [])):
                trial.set_constraint(slo.key, value)  # measured - limit: <= 0 is feasible for NSGA-II
        return row

    def _constraints(self, result: TrialResult) -> list[float]:
        return [slo_violation(result.slo_checks.get(slo.key, {}), slo.limit * 1e3) for slo in self.slos]

    def _ask(self):
        """The next trial: the predictor's pick (queued first) or the sampler's. Ctrl-C and SIGTERM wait
        until the queued pick is taken, so none is left WAITING in the file (it would run on --resume
        ahead of the baseline's successors, outside the budget the user saw)."""
        if not self.guided:
            return self.study.ask()
        guess = self._guess()  # the slow part (a prediction per candidate) stays interruptible
        blocked = {signal.SIGINT, signal.SIGTERM, signal.SIGHUP}
        signal.pthread_sigmask(signal.SIG_BLOCK, blocked)
        try:
            if guess is not None:
                self.study.enqueue_trial(guess, user_attrs={"picked_by": "predictor"})
            return self.study.ask()
        finally:
            signal.pthread_sigmask(signal.SIG_UNBLOCK, blocked)

    def _guess(self) -> dict | None:
        """The predictor's best untried candidate's knob values; None when a trial is already queued (the
        baseline), nothing is measured yet to calibrate the model, or it is the sampler's turn (EXPLORE_EVERY)."""
        from optuna.trial import TrialState

        from model_optimizer.optimizer.tune.guide import rank

        trials = self.study.get_trials(deepcopy=False)
        if self.predictor is None or any(t.state == TrialState.WAITING for t in trials):
            return None
        done = [t for t in trials if t.state in (TrialState.COMPLETE, TrialState.FAIL) and not is_interrupted(t)]
        if not done or len(done) % EXPLORE_EVERY == EXPLORE_EVERY - 1:
            return None
        load = self.load or self._measured_load()
        if load is None:
            return None
        tried = [t.user_attrs["settings"] for t in trials if t.user_attrs.get("settings")]
        measured = [
            self.predictor.predict(t.user_attrs["settings"], load) for t in done if t.user_attrs.get("settings")
        ]
        ranked = rank(self.space, self.predictor, load, self.slo_ms, tried, measured, limit=1)
        return ranked[0].params if ranked else None

    def _measured_twin(self, settings: dict) -> int | None:
        """The number of an earlier measured trial (COMPLETE, or FAIL but not interrupted) with these settings."""
        for t in self.study.get_trials(deepcopy=False):
            if (
                t.user_attrs.get("settings") == settings
                and t.state.name in ("COMPLETE", "FAIL")
                and not is_interrupted(t)
            ):
                return t.number
        return None

    def _waiting(self) -> bool:
        from optuna.trial import TrialState

        return any(t.state == TrialState.WAITING for t in self.study.get_trials(deepcopy=False))

    def _measured(self) -> int:
        """The trials of the budget: those measured, the failed among them, but not the interrupted ones."""
        from optuna.trial import TrialState

        trials = self.study.get_trials(deepcopy=False)
        return sum(t.state in (TrialState.COMPLETE, TrialState.FAIL) and not is_interrupted(t) for t in trials)

    def _measured_load(self) -> Workload | None:
        """Lengths from the first measured trial, for workloads read from files."""
        for t in self.study.get_trials(deepcopy=False):
            m = t.user_attrs.get("measured") or {}
            if m.get("ok"):
                return workload_of(self.setup, m["mean_prompt_len"], m["mean_output_len"])
        return None

    def measured_pairs(self) -> list[tuple[Prediction, dict]]:
        """(ideal prediction, measured figures) of every trial that measured something."""
        pairs = []
        for t in self.study.get_trials(deepcopy=False):
            m, ideal = t.user_attrs.get("measured") or {}, t.user_attrs.get("ideal")
            if m.get("ok") and ideal and ideal.get("features"):  # an earlier predictor's record has none
                pairs.append((Prediction(**ideal), m))
        return pairs

    def _refit(self) -> None:
        if self.predictor is not None:
            self.predictor.refit(self.measured_pairs())
