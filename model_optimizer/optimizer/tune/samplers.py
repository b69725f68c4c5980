"""How a study draws its candidates: optuna's NSGA-II or TPE sampler, or every point of a grid queued up
front; and the point of the engine's defaults, the baseline every other trial is compared with."""

from __future__ import annotations

import itertools
import math

from model_optimizer.optimizer.tune.space import SearchSpace, engine_default

SAMPLERS = ("nsga2", "tpe", "grid")


def make_sampler(name: str, seed: int, space: SearchSpace | None = None):
    """NSGA-II (default) or multi-objective TPE, both reading the SLO constraints set on each trial;
    or a grid over every combination of the knobs' choices (vLLM auto_tune's method, for comparison)."""
    import optuna

    # optuna 5 reads constraints set on the trial (Trial.set_constraint); optuna 4 asks a function for them
    legacy = {} if hasattr(optuna.trial.Trial, "set_constraint") else {"constraints_func": constraints_of}
    if name == "nsga2":
        return optuna.samplers.NSGAIISampler(seed=seed, population_size=8, **legacy)
    if name == "tpe":
        return optuna.samplers.TPESampler(seed=seed, multivariate=True, n_startup_trials=4, **legacy)
    if name == "grid":  # the points are queued up front (enqueue_grid); the sampler only fills none
        if space is None or any(k.choices is None for k in space.knobs):
            raise ValueError("--sampler grid needs a list of choices for every knob (no low/high ranges)")
        return optuna.samplers.RandomSampler(seed=seed)
    raise ValueError(f"--sampler must be one of {', '.join(SAMPLERS)}, got {name!r}")


def constraints_of(trial) -> list[float]:
    """optuna 4's view of a trial's SLO constraints: measured - limit per SLO (<= 0: met)."""
    return list(trial.user_attrs.get("constraints", []))


def grid_size(space: SearchSpace) -> int:
    """The grid's points: every combination of the knobs' choices."""
    return math.prod(len(k.choices or ()) for k in space.knobs)


def default_params(space: SearchSpace) -> dict | None:
    """The engine's default value of every searched knob, or None when one lies outside the space."""
    params = {}
    searched = {k.name for k in space.knobs}
    for knob in space.knobs:
        value = engine_default(knob, space.fixed, searched)  # speculative knobs are no EngineConfig field
        inside = value in knob.choices if knob.choices is not None else knob.low <= value <= knob.high
        if not inside:
            return None
        params[knob.name] = value
    return params


def enqueue_grid(study, space: SearchSpace) -> None:
    """Queue every combination of the knobs' choices, in order (the first knob varies slowest). The
    combination of the engine's defaults, when the grid holds it, is the baseline (what --repeat-baseline
    measures again at the end)."""
    baseline = default_params(space)
    for values in itertools.product(*(k.choices or () for k in space.knobs)):
        params = dict(zip((k.name for k in space.knobs), values))
        study.enqueue_trial(params, user_attrs={"baseline": True} if params == baseline else None)
