"""How far apart two measurements of the same settings land: the yardstick for "better than the defaults".

A trial is one cold server and one short load, so its goodput carries run-to-run noise (clock boost, the
host's other work, which requests happen to meet the p99). With `--repeat-baseline` the study measures the
default settings a second time as its last trial; the spread between the two baseline measurements is the
noise estimate. A best trial that beats the baseline by less than that spread is reported as within noise
rather than as a win.
"""

from __future__ import annotations


def baseline_measurements(rows: list[dict]) -> list[dict]:
    """The completed trials of the default settings (the baseline and its repeats), in trial order."""
    return [
        r
        for r in rows
        if (r.get("baseline") or r.get("baseline_repeat")) and r["state"] == "COMPLETE" and r.get("measured")
    ]


def noise_summary(rows: list[dict], best: dict | None) -> dict:
    """Spread of the baseline's goodput and p99 latencies over its measurements, and whether `best` (a row
    of the study) beats the baseline by more than that spread. With one measurement there is no estimate."""
    base = baseline_measurements(rows)
    out: dict = {"baseline_trials": [r["number"] for r in base]}
    if len(base) < 2:
        out["note"] = (
            "the defaults were measured once: no noise estimate (give --repeat-baseline to measure them again "
            "at the end of the study)"
            if base
            else "no completed baseline trial: no noise estimate"
        )
        return out
    figures = {}
    for key in ("goodput", "ttft_p99_ms", "tpot_p99_ms"):
        values = [r["measured"].get(key) for r in base]
        if any(v is None for v in values):
            continue
        mean = sum(values) / len(values)
        spread = max(values) - min(values)
        figures[key] = {
            "values": values,
            "mean": mean,
            "spread": spread,
            "relative_spread": spread / mean if mean else None,
        }
    out["figures"] = figures
    goodput = figures.get("goodput")
    if best is None or goodput is None or best.get("number") in out["baseline_trials"]:
        out["note"] = (
            f"baseline goodput {_fmt(goodput['values'])} req/s over {len(base)} measurements"
            if goodput
            else "no goodput measured"
        )
        return out
    gain = best["measured"]["goodput"] - goodput["mean"]
    within = abs(gain) <= goodput["spread"]
    out |= {"best_trial": best["number"], "best_minus_baseline": gain, "within_noise": within}
    verdict = "within the noise: not a measured win" if within else "more than the noise"
    out["note"] = (
        f"best trial {best['number']} differs from the defaults' mean goodput by {gain:+.4g} req/s; the "
        f"defaults measured {_fmt(goodput['values'])} req/s (spread {goodput['spread']:.4g}): {verdict}"
    )
    return out


def _fmt(values: list[float]) -> str:
    return " and ".join(f"{v:.4g}" for v in values)


MIN_RANK_REQUESTS = 100
"""Fewer counted requests in a trial than this and its p99 (which decides goodput under an SLO) is its
slowest request or close to it: two such trials do not rank (bench/report.py warns alike)."""


def ranking(rows: list[dict], best: dict | None) -> dict:
    """Whether the study can say the chosen trial beats the defaults, and how to read its gain:
    `ranked` only when both trials counted at least MIN_RANK_REQUESTS requests and their difference is
    larger than the spread of the defaults measured twice (--repeat-baseline)."""
    base = baseline_measurements(rows)
    if best is None or not base:
        return {"ranked": False, "gain": None, "note": "no completed baseline trial to compare with"}
    baseline = base[0]
    if best["number"] in [r["number"] for r in base]:
        return {"ranked": False, "gain": 1.0, "note": "the defaults measured best"}
    before, after = baseline["measured"]["goodput"], best["measured"]["goodput"]
    gain = after / before if before else None
    counted = [r["measured"].get("counted_requests") for r in (baseline, best)]
    few = min((c for c in counted if c is not None), default=None)
    noise = noise_summary(rows, best)
    if few is not None and few < MIN_RANK_REQUESTS:
        why = (
            f"not ranked: the trials counted {few} requests (fewer than {MIN_RANK_REQUESTS}), so their p99s are "
            f"their slowest requests; give --num-requests {MIN_RANK_REQUESTS} or more"
        )
    elif "within_noise" not in noise:
        why = "not ranked: no noise estimate (give --repeat-baseline to measure the defaults twice)"
    elif noise["within_noise"]:
        why = "not ranked: within the spread of the defaults measured twice"
    else:
        return {"ranked": True, "gain": gain, "note": f"{_ratio(gain)} the defaults' goodput, more than the noise"}
    return {"ranked": False, "gain": gain, "note": f"{_ratio(gain)} the defaults' goodput, {why}"}


def _ratio(gain: float | None) -> str:
    return "no goodput for" if gain is None else f"{gain:.2f}x"
