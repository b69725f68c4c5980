"""Token-length distributions written as short strings, so one flag can describe them.

"256"                   fixed
"uniform:64:512"        uniform integers in [64, 512]
"normal:512:128"        normal with mean 512 and standard deviation 128, rounded, at least 1
"hist:64=0.5,512=0.5"   a histogram: each length with its weight
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

KINDS = ("fixed", "uniform", "normal", "hist")
MAX_TOKENS = 1 << 24
"""Longest length a spec may give (16,777,216 tokens, above any model's context): longer ones are typos,
and their prompts were allocated before the run (4e9 ids: a 30 GiB MemoryError; past int64 an OverflowError)."""


@dataclass(frozen=True)
class LengthDist:
    """A parsed length distribution; `sample` draws token counts from it."""

    kind: str
    values: tuple[float, ...]
    weights: tuple[float, ...] = ()

    def sample(self, rng: np.random.Generator, n: int) -> np.ndarray:
        """Draw `n` lengths (int64, each at least 1)."""
        if self.kind == "fixed":
            out = np.full(n, self.values[0])
        elif self.kind == "uniform":
            out = rng.integers(int(self.values[0]), int(self.values[1]) + 1, size=n)
        elif self.kind == "normal":
            out = np.rint(rng.normal(self.values[0], self.values[1], size=n))
        else:
            probs = np.asarray(self.weights) / sum(self.weights)
            out = rng.choice(np.asarray(self.values), size=n, p=probs)
        return np.maximum(out, 1).astype(np.int64)

    def mean(self) -> float:
        """Expected length, for sizing pools and messages."""
        if self.kind == "hist":
            return float(np.average(self.values, weights=self.weights))
        if self.kind == "uniform":
            return (self.values[0] + self.values[1]) / 2
        return float(self.values[0])


def parse_length(spec: str, name: str = "length") -> LengthDist:
    """Parse a length spec; raise ValueError saying which forms are allowed."""
    text = str(spec).strip()
    help_text = (
        f"{name} must be N, uniform:LO:HI, normal:MEAN:STD or hist:LEN=WEIGHT,... (lengths 1 to {MAX_TOKENS:,}, "
        f"finite weights); got {spec!r}"
    )
    try:
        if ":" not in text:
            return _checked(LengthDist("fixed", (int(text),)), help_text)
        kind, rest = text.split(":", 1)
        if kind == "uniform":
            lo, hi = (int(v) for v in rest.split(":"))
            return _checked(LengthDist("uniform", (lo, hi)), help_text)
        if kind == "normal":
            mean, std = (float(v) for v in rest.split(":"))
            return _checked(LengthDist("normal", (mean, std)), help_text)
        if kind == "hist":
            pairs = [item.split("=") for item in rest.split(",") if item.strip()]
            values = tuple(int(length) for length, _ in pairs)
            weights = tuple(float(weight) for _, weight in pairs)
            return _checked(LengthDist("hist", values, weights), help_text)
    except ValueError:
        raise ValueError(help_text) from None
    raise ValueError(help_text)


def _checked(dist: LengthDist, help_text: str) -> LengthDist:
    # finite and bounded: normal:1:inf or normal:1e300:1 drew NaN or huge lengths that failed as
    # "negative dimensions are not allowed", and an inf weight as "Probabilities contain NaN"
    ok = bool(dist.values) and all(0 < v <= MAX_TOKENS for v in dist.values)
    if dist.kind == "uniform":
        ok = ok and dist.values[0] <= dist.values[1]
    if dist.kind == "normal":
        ok = 0 < dist.values[0] <= MAX_TOKENS and 0 <= dist.values[1] <= MAX_TOKENS
    if dist.kind == "hist":
        ok = (
            ok
            and len(dist.weights) == len(dist.values)
            and all(0 <= w < math.inf for w in dist.weights)
            and 0 < sum(dist.weights) < math.inf
        )
    if not ok:
        raise ValueError(help_text)
    return dist
