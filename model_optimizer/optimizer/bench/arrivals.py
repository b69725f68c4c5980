"""When to send: arrival offsets (seconds from the start) for open-loop load.

Poisson arrivals have exponential gaps; `burstiness` b draws gaps from a gamma distribution
with shape b and the same mean 1/rate instead (b < 1 burstier, b > 1 more regular, 1 Poisson).
"""

from __future__ import annotations

import math
from collections.abc import Iterator

import numpy as np


def arrival_times(rng: np.random.Generator, rate: float, pattern: str, burstiness: float = 1.0) -> Iterator[float]:
    """Endless offsets for `pattern` in {constant, poisson} at `rate` requests/s (inf: all at 0)."""
    if rate <= 0:
        raise ValueError(f"request_rate must be positive, got {rate}")
    if burstiness <= 0:
        raise ValueError(f"burstiness must be positive, got {burstiness}")
    t = 0.0
    while True:
        yield t
        if math.isinf(rate):
            continue
        if pattern == "constant":
            t += 1.0 / rate
        else:
            # gamma(shape=b, scale=1/(rate*b)) has mean 1/rate; b = 1 is the exponential
            t += float(rng.gamma(burstiness, 1.0 / (rate * burstiness)))


def trace_times(timestamps: list[float], speedup: float = 1.0) -> Iterator[float]:
    """Recorded offsets, compressed by `speedup` (2.0 replays twice as fast)."""
    if speedup <= 0:
        raise ValueError(f"trace_speedup must be positive, got {speedup}")
    for t in timestamps:
        yield t / speedup
