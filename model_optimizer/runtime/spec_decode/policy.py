"""Whether a step speculates: on where it pays, off where it does not, decided from measurements.

Speculation trades compute for steps: each request computes 1 + k tokens to keep 1 + (accepted) of
them. At one or a few requests a step costs one read of the weights whatever its width, so that is
free; at high load the batch is already compute-bound, the extra tokens cost their full price, and
the synchronous step (engine/core.py) loses the overlap of host and device. No fixed threshold is
right for every model, GPU and acceptance rate, so the policy measures.

Per batch-size bucket (running requests: 1, 2, 3-4, 5-8, ...) it keeps the throughput of each mode,
generated tokens over step time (moving averages), and runs the faster one. The slower one is
re-measured now and then (a probe of a few steps, at intervals that double while it keeps losing,
up to MAX_PROBE_INTERVAL), so a change of acceptance rate or load is noticed; at high load the
probes cost at most PROBE_STEPS / MIN_PROBE_INTERVAL of the steps, and far fewer once the interval
has grown. The first step after a switch is not measured: it also pays for the switch (collecting
the step in flight). `disable_by_batch_size` (vLLM's knob) turns speculation off above a size outright.

Pure Python, no torch: the engine core calls it.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from model_optimizer.runtime.spec_decode.config import SpeculativeConfig

WARMUP_STEPS = 3
"""Measured steps of each mode before the policy compares them."""
PROBE_STEPS = 3
"""Steps of the slower mode per probe (the first is not measured)."""
MIN_PROBE_INTERVAL = 64
MAX_PROBE_INTERVAL = 4096
EMA = 0.2
"""Weight of the newest step in the moving averages."""


@dataclass
class _Rate:
    """Moving averages of one mode's step time and tokens per step."""

    count: int = 0
    seconds: float = 0.0
    tokens: float = 0.0

    def add(self, seconds: float, tokens: int) -> None:
        weight = 1.0 if self.count == 0 else EMA
        self.seconds += weight * (seconds - self.seconds)
        self.tokens += weight * (tokens - self.tokens)
        self.count += 1

    @property
    def tokens_per_s(self) -> float:
        return self.tokens / self.seconds if self.seconds > 0 else 0.0


@dataclass
class _Bucket:
    spec: _Rate = field(default_factory=_Rate)
    plain: _Rate = field(default_factory=_Rate)
    best: bool = True
    """The mode that measured faster (True: speculate)."""
    steps_since_probe: int = 0
    probe_interval: int = MIN_PROBE_INTERVAL
    probe_left: int = 0


def bucket_of(num_running: int) -> int:
    """1 -> 1, 2 -> 2, 3-4 -> 3, 5-8 -> 4, ...: batch sizes whose steps cost about the same."""
    return max(num_running - 1, 0).bit_length() + 1


class SpecPolicy:
    """Decides per step whether to speculate (see the module docstring)."""

    def __init__(self, config: SpeculativeConfig) -> None:
        self.config = config
        self._buckets: dict[int, _Bucket] = {}

    def should_speculate(self, num_running: int) -> bool:
        limit = self.config.disable_by_batch_size
        if num_running == 0 or (limit is not None and num_running >= limit):
            return False
        if not self.config.adaptive:
            return True
        b = self._buckets.setdefault(bucket_of(num_running), _Bucket())
        if b.probe_left:
            b.probe_left -= 1
            return not b.best
        if b.spec.count < WARMUP_STEPS:
            return True
        if b.plain.count < WARMUP_STEPS:
            return False
        best = b.spec.tokens_per_s >= b.plain.tokens_per_s
        if best != b.best:  # the other mode won: probe the loser soon again
            b.best, b.probe_interval, b.steps_since_probe = best, MIN_PROBE_INTERVAL, 0
        b.steps_since_probe += 1
        if b.steps_since_probe >= b.probe_interval:
            b.steps_since_probe = 0
            b.probe_interval = min(2 * b.probe_interval, MAX_PROBE_INTERVAL)
            b.probe_left = PROBE_STEPS - 1
            return not best
        return best

    def record(self, num_running: int, speculated: bool, seconds: float, num_tokens: int) -> None:
        """A measured step: its mode, how long it took and how many tokens it generated."""
        if num_running == 0 or seconds <= 0:
            return
        b = self._buckets.setdefault(bucket_of(num_running), _Bucket())
        (b.spec if speculated else b.plain).add(seconds, num_tokens)

    def summary(self) -> dict[int, dict[str, float]]:
        """Per bucket (its largest batch size): tokens/s measured with and without speculation."""
        return {
            2 ** (key - 1): {"spec_tokens_per_s": b.spec.tokens_per_s, "plain_tokens_per_s": b.plain.tokens_per_s}
            for key, b in sorted(self._buckets.items())
        }
