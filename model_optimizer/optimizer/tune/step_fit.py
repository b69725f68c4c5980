"""The fitted step time: t_step = o_step + o_eager * g + e * roof_mean + ar * collectives + sum_k c_k * flag_k
(predictor.py says what each term is), its prior coefficients before any measurement, and their refit
from measured trials by least squares on relative error with a weak pull towards the prior.
"""

from __future__ import annotations

import math

import numpy as np

from model_optimizer.optimizer.tune.hardware import Hardware

BASE_TERMS = ("o_step", "o_eager", "e", "ar")
"""The terms every fit has; each flag that a measured trial sets adds one (FLAG_DEFAULTS in predictor.py)."""
CPU_STEP_MS_PER_LAYER = 1.5
CPU_SEQ_MS_PER_LAYER = 0.2
"""Our engine's CPU step beyond the roofline: op dispatch per decoder layer, and per running sequence and
layer (attention on the torch path, sampling, bookkeeping). From benchmarks/results/cpu_engine_steps.json:
the built-in 8-layer model took 15 ms of CPU time per step at batch 1 and 1.9 ms more per sequence up to
64 (one thread), where twice the measured roofline explains 3 ms and 0.1 ms per sequence."""


def prior_coefficients(hardware: Hardware, num_layers: int = 0) -> dict[str, float]:
    """Before any measurement: a graph replay costs little per step, an eager step a few ms of Python and
    launches, and the kernels reach half the roofline. On a CPU every step is eager and its fixed cost
    grows with the layers and the sequences (o_seq, a CPU-only term)."""
    if hardware.is_gpu:
        return {"o_step": 1.0, "o_eager": 4.0, "e": 2.0, "ar": 1.0}
    return {
        "o_step": max(1.0, CPU_STEP_MS_PER_LAYER * num_layers),
        "o_eager": 0.0,
        "e": 2.0,
        "ar": 1.0,
        "o_seq": CPU_SEQ_MS_PER_LAYER * num_layers,
    }


PRIOR_SCALE = {"o_step": 1000.0, "o_eager": 1000.0, "e": 100.0, "ar": 10.0, "o_seq": 100.0}
"""How far (ms, or times the roofline) a coefficient may move from its prior before the pull matters:
far, so measurements decide; the pull only settles what no trial distinguishes. Flags: FLAG_SCALE ms."""
FLAG_SCALE = 100.0
PULL = 1e-4


def fit_steps(rows: list[tuple[dict[str, float], float]], prior: dict[str, float]) -> dict[str, float]:
    """Coefficients of t_step = sum(coef * feature) minimising the relative squared error over
    (features, measured ms) rows plus a weak pull to `prior` (flags pulled to 0)."""
    base = [*BASE_TERMS, *(["o_seq"] if "o_seq" in prior else [])]  # o_seq: CPU priors only
    names = base + sorted({k for f, _ in rows for k in f if k.startswith("flag:")})
    if not rows:
        return dict(prior)
    x = np.array([[_term(f, n) for n in names] for f, _ in rows], dtype=float)
    y = np.array([t for _, t in rows], dtype=float)
    x, y = x / y[:, None], np.ones_like(y)  # relative error: every trial counts alike whatever its size
    scale = np.array([PRIOR_SCALE.get(n, FLAG_SCALE) for n in names])
    theta0 = np.array([prior.get(n, 0.0) for n in names])
    # solve for d = (theta - theta0) / scale, pulled towards 0 with weight PULL
    a = np.vstack([x * scale, math.sqrt(PULL) * np.eye(len(names))])
    b = np.concatenate([y - x @ theta0, np.zeros(len(names))])
    d, *_ = np.linalg.lstsq(a, b, rcond=None)
    return dict(zip(names, (theta0 + d * scale).tolist()))


def _term(features: dict[str, float], name: str) -> float:
    g = features.get("g", 1.0)
    if name == "o_step":
        return 1.0
    if name == "o_eager":
        return g
    if name == "e":
        return features.get("roof_ms", 0.0)
    if name == "ar":
        return features.get("allreduce_ms", 0.0)
    if name == "o_seq":
        return features.get("running", 0.0)
    return features.get(name, 0.0)


def step_ms(coef: dict[str, float], features: dict[str, float]) -> float:
    """The fitted step time (ms), never below a tenth of the roofline (a fit can extrapolate badly)."""
    value = sum(c * _term(features, n) for n, c in coef.items())
    return max(value, 0.1 * features.get("roof_ms", 0.0), 1e-3)
