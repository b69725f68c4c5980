"""The Pareto front of measured trials, and the one trade-off `--prefer` picks from it."""

from __future__ import annotations

from typing import Literal

from model_optimizer.optimizer.tune.objectives import OBJECTIVES

Prefer = Literal["goodput", "latency", "memory"]
PREFER_CHOICES = ("goodput", "latency", "memory")


def feasible(row: dict) -> bool:
    """A completed trial that met every SLO (constraints <= 0)."""
    return row.get("state") == "COMPLETE" and all(c <= 0 for c in row.get("constraints", []))


def dominates(a: list[float], b: list[float]) -> bool:
    """`a` is at least as good as `b` in every objective and better in one (directions from OBJECTIVES)."""
    signed = [(x, y) if d == "minimize" else (-x, -y) for (x, y), (_, d) in zip(zip(a, b), OBJECTIVES)]
    return all(x <= y for x, y in signed) and any(x < y for x, y in signed)


def pareto_front(rows: list[dict]) -> list[dict]:
    """Non-dominated completed trials; only feasible ones when any trial met the SLOs."""
    done = [r for r in rows if r.get("state") == "COMPLETE" and r.get("values")]
    pool = [r for r in done if feasible(r)] or done
    return [r for r in pool if not any(dominates(o["values"], r["values"]) for o in pool if o is not r)]


def choose(front: list[dict], prefer: str) -> dict | None:
    """The front's trial with the most goodput, the lowest p99 latency (TTFT then TPOT) or the least memory."""
    if prefer not in PREFER_CHOICES:
        raise ValueError(f"--prefer must be one of {', '.join(PREFER_CHOICES)}, got {prefer!r}")
    if not front:
        return None
    m = lambda r, k: r["measured"].get(k) if r["measured"].get(k) is not None else float("inf")  # noqa: E731
    if prefer == "goodput":
        return max(front, key=lambda r: (r["measured"]["goodput"] or 0.0, -m(r, "tpot_p99_ms")))
    if prefer == "latency":
        return min(front, key=lambda r: (m(r, "ttft_p99_ms"), m(r, "tpot_p99_ms")))
    return min(front, key=lambda r: (m(r, "memory_gib"), -(r["measured"]["goodput"] or 0.0)))
