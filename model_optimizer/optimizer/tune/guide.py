"""Which candidate to measure next: the one the predictor rates best, not a random draw.

A short study cannot afford random trials (each costs a cold start and a load run), so after the
baseline every trial measures the unmeasured candidate with the highest predicted goodput under the
SLOs. Predicted goodput is the request rate times the share of requests expected to meet each SLO,
taking each request's latency as log-normal around the predicted p99 (spread LATENCY_SPREAD): a
candidate predicted just over an SLO still scores, one far over it scores ~0. Candidates within
SCORE_TIE of the best are equally good as far as the model can tell; among them the one whose
predicted figures differ most from every trial measured so far is taken (it teaches the refit most,
and a knob the load makes moot, such as max_num_seqs above the clients in flight, teaches nothing),
then the one closest to the defaults.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass

from model_optimizer.optimizer.tune.predictor import Prediction, Predictor, Workload
from model_optimizer.optimizer.tune.space import SearchSpace, engine_default, with_speculation

LATENCY_SPREAD = 0.1
"""Sigma of log(latency) across requests of one run (p99 / median = exp(Z99 x sigma)), set from the p99 / median
of the H200 study's trials (README "Tune: mopt tune", guided search)."""
SCORE_TIE = 0.02
"""Relative difference in predicted goodput below which two candidates count as equally good."""
MAX_CANDIDATES = 20000
"""Spaces with more combinations are left to the sampler."""
Z99 = 2.3263


@dataclass
class Ranked:
    settings: dict
    params: dict
    """The knobs' values (what optuna's enqueue_trial takes)."""
    score: float
    prediction: Prediction


def candidates(space: SearchSpace) -> list[dict] | None:
    """Every combination of the knobs' choices, or None when a knob is a range or there are too many."""
    if any(k.choices is None for k in space.knobs):
        return None
    if math.prod(len(k.choices) for k in space.knobs) > MAX_CANDIDATES:
        return None
    names = [k.name for k in space.knobs]
    return [dict(zip(names, values)) for values in itertools.product(*(k.choices for k in space.knobs))]


def predicted_goodput(pred: Prediction, slo_ms: dict[str, float]) -> float:
    """Requests per second expected to meet every SLO."""
    rate = pred.output_throughput / max(pred.output_len, 1.0)
    share = 1.0
    for metric, value in (("tpot", pred.tpot_ms), ("ttft", pred.ttft_ms)):
        limit = slo_ms.get(metric)
        if limit is not None and value > 0:
            share *= _phi(Z99 + math.log(limit / value) / LATENCY_SPREAD)
    return rate * share


def rank(
    space: SearchSpace,
    predictor: Predictor,
    load: Workload,
    slo_ms: dict[str, float],
    tried: list[dict],
    measured: list[Prediction],
    limit: int | None = None,
) -> list[Ranked]:
    """Untried candidates that fit, best first (see the module docstring), at most `limit` of them; [] when
    the space cannot be listed."""
    found = []
    for params in candidates(space) or []:
        # as a trial records them (speculative knobs made into speculative_config), else a tried candidate came
        # up again and again; checked by the configs only when it comes up (below): slow
        try:
            settings = with_speculation({**space.fixed, **params})
        except ValueError:
            continue  # the sampler may still draw it, and the trial records why it is impossible
        if settings in tried:
            continue
        pred = predictor.predict(settings, load)
        if pred.fits:
            found.append(Ranked(settings, params, predicted_goodput(pred, slo_ms), pred))
    if not found:
        return []
    best = max(r.score for r in found)
    searched = {k.name for k in space.knobs}
    defaults = {k.name: engine_default(k, space.fixed, searched) for k in space.knobs}

    def key(r: Ranked) -> tuple:
        tied = r.score >= best * (1 - SCORE_TIE)
        novelty = min((_distance(r.prediction, m) for m in measured), default=0.0)
        departures = sum(defaults.get(k) != v for k, v in r.params.items())
        return (not tied, -r.score if not tied else 0.0, -novelty if novelty > 1e-9 else 0.0, departures)

    out = []
    for r in sorted(found, key=key):
        if limit is not None and len(out) >= limit:
            break
        if _allowed(space, r):
            out.append(r)
    return out


def _allowed(space: SearchSpace, ranked: Ranked) -> bool:
    """Whether the engine accepts the combination (each value alone was checked with the space)."""
    try:
        ranked.settings = space.settings(ranked.params)
    except ValueError:
        return False  # the sampler may still draw it, and the trial records why it is impossible
    return True


def _distance(a: Prediction, b: Prediction) -> float:
    """How differently two candidates are predicted to behave: the largest relative gap of TPOT, TTFT and
    throughput."""
    gaps = [
        abs(math.log(x / y))
        for x, y in (
            (a.tpot_ms, b.tpot_ms),
            (a.ttft_ms, b.ttft_ms),
            (a.output_throughput, b.output_throughput),
        )
        if x > 0 and y > 0
    ]
    return max(gaps, default=0.0)


def _phi(z: float) -> float:
    return 0.5 * (1.0 + math.erf(z / math.sqrt(2.0)))
