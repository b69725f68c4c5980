"""What each measured trial tells optuna: five objectives (goodput up; p99 TTFT, p99 TPOT, memory and cold
start down) and one constraint per SLO (measured - limit, <= 0 feasible), so NSGA-II keeps infeasible
settings off the front."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from model_optimizer.optimizer.tune.trial import TrialResult

OBJECTIVES = (
    ("goodput", "maximize"),
    ("ttft_p99_ms", "minimize"),
    ("tpot_p99_ms", "minimize"),
    ("memory_gib", "minimize"),
    ("cold_start_s", "minimize"),
)


def objective_values(result: TrialResult) -> list[float]:
    """The five objectives in OBJECTIVES order; a figure the trial could not measure counts as worst."""
    worst = {"goodput": 0.0}
    values = []
    for name, _ in OBJECTIVES:
        value = getattr(result, name)
        values.append(float(value) if value is not None else worst.get(name, 1e9))
    return values


def slo_violation(check: dict, limit_ms: float) -> float:
    """An SLO check of a bench run (metrics.slo_check) as NSGA-II's constraint: measured - limit, <= 0
    feasible. Where failed requests made the statistic infinite (a mean or max with one failure, a p99 with
    more than 1 % failed) it is graded by the share of requests that failed or missed, so a trial with one
    timeout stays nearer feasible than one with none measured (1e6). A term no request had a figure for (TPOT
    or ITL where every answer is one token: bench's slo_check marks it undefined) is met."""
    measured, share = check.get("measured_ms"), check.get("share_over_limit")
    if check.get("undefined"):
        return 0.0  # met, as goodput counts those requests
    if measured is None and share is not None:
        return max(limit_ms, 1.0) * (1.0 + 100.0 * share)
    if measured is None:
        return 1e6  # nothing measured: as far from feasible as it gets
    if not check.get("met", False):
        return max(measured - limit_ms, 1.0)  # missed, if only through failed requests
    return measured - limit_ms
