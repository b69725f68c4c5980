"""Whether a step speculates: on where it pays, off where it does not, decided from measurements.

Speculation trades compute for steps: each request computes 1 + k tokens to keep 1 + (accepted) of
them. At one or a few requests a step costs one read of the weights whatever its width, so that is
free; at high load the batch is already compute-bound, the extra tokens cost their full price, and
the synchronous step (engine/core.py) loses the overlap of host and device. No fixed threshold is
right for every model, GPU and acceptance rate, so the policy measures, and it is built so that high
load never pays for finding out.

The cost model. At a batch-size bucket (running requests: 1, 2, 3-4, 5-8, ...) speculating pays when
the tokens a step gains, g = (tokens per request-step speculating) / (tokens per request-step not),
exceed what the step costs more, r = (speculative step time) / (plain step time) at that bucket, by
MARGIN. g
is the acceptance and hardly depends on the batch, so it is one moving average over every measured
speculative step (a change of acceptance seen at low load re-decides high load, with no probe there);
r is measured per bucket, and it only grows with the batch (the extra k tokens per request move the
step from weight-bound to compute-bound). Hence, for a bucket not measured in both modes:
- a smaller bucket with g <= r loses, so this one does too (monotone inference: no probe);
- a larger bucket with g > r wins, so this one does too;
- otherwise the verdict is unknown and it is probed (after the plain mode has been measured).

Probing is bounded: a probe is two steps of the other mode (the first after a switch is not
measured: it collects a step of the other mode), repeated per bucket at intervals from MIN_PROBE_INTERVAL
doubling to MAX_PROBE_INTERVAL while the verdict holds, and all probes together stay within
PROBE_ALLOWANCE + PROBE_SHARE of the steps. Steps with prompt tokens are not measured (their cost is
the prefill's), and nothing is probed while a prompt is being prefilled.
`disable_by_batch_size` (vLLM's knob) turns speculation off above a size outright.

Pure Python, no torch: the engine core calls it.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from model_optimizer.runtime.spec_decode.config import SpeculativeConfig

MIN_PROBE_INTERVAL = 256
"""Steps of a bucket between probes of its losing mode, after a new verdict."""
MAX_PROBE_INTERVAL = 8192
"""The interval doubles after each probe that confirms the verdict, up to this."""
PROBE_SHARE = 0.01
"""Probe steps may be at most this share of all steps (beyond PROBE_ALLOWANCE)..."""
PROBE_ALLOWANCE = 8
"""...plus this many: the first probes of a fresh engine."""
EMA = 0.2
"""Weight of the newest step in the moving averages."""
MARGIN = 1.05
"""Speculating must gain this much more than it costs (g > MARGIN * r): a near tie (nothing accepted, a
step that costs the same either way) goes to the plain mode, which keeps the host's work overlapped."""


@dataclass
class _Rate:
    """Moving averages of one mode's step time and tokens per running request."""

    count: int = 0
    seconds: float = 0.0
    tokens: float = 0.0

    def add(self, seconds: float, tokens: float) -> None:
        weight = 1.0 if self.count == 0 else EMA
        self.seconds += weight * (seconds - self.seconds)
        self.tokens += weight * (tokens - self.tokens)
        self.count += 1


@dataclass
class _Bucket:
    spec: _Rate = field(default_factory=_Rate)
    plain: _Rate = field(default_factory=_Rate)
    verdict: bool | None = None
    """The last verdict acted on (True: speculate); a change restarts the probe interval."""
    steps_since_probe: int = 0
    probe_interval: int = MIN_PROBE_INTERVAL
    probe_left: int = 0
    """Steps of the probe in progress still to run (of the mode opposite to the verdict)."""

    @property
    def ratio(self) -> float | None:
        """r: speculative over plain step time, once both are measured."""
        if self.spec.count and self.plain.count and self.plain.seconds > 0:
            return self.spec.seconds / self.plain.seconds
        return None


def bucket_of(num_running: int) -> int:
    """1 -> 1, 2 -> 2, 3-4 -> 3, 5-8 -> 4, ...: batch sizes whose steps cost about the same."""
    return max(num_running - 1, 0).bit_length() + 1


class SpecPolicy:
    """Decides per step whether to speculate (see the module docstring)."""

    def __init__(self, config: SpeculativeConfig) -> None:
        self.config = config
        self._buckets: dict[int, _Bucket] = {}
        self._spec_tokens = _Rate()
        """Tokens per running request of measured speculative steps, over all buckets."""
        self._plain_tokens = _Rate()
        self.num_steps = 0
        self.num_probes = 0
        """Steps run in a mode other than the verdict's (or to find an unknown verdict)."""

    @property
    def gain(self) -> float | None:
        """g: tokens per request-step speculating over those not speculating, once both are measured."""
        if self._spec_tokens.count and self._plain_tokens.count and self._plain_tokens.tokens > 0:
            return self._spec_tokens.tokens / self._plain_tokens.tokens
        return None

    def should_speculate(self, num_running: int, prefilling: bool = False) -> bool:
        """Whether the next step speculates; `prefilling`: a running request still computes its prompt."""
        limit = self.config.disable_by_batch_size
        if num_running == 0 or (limit is not None and num_running >= limit):
            return False
        if not self.config.adaptive:
            return True
        self.num_steps += 1
        key = bucket_of(num_running)
        b = self._buckets.setdefault(key, _Bucket())
        if b.probe_left:
            b.probe_left -= 1
            return self._probe(not b.verdict)
        verdict = self.verdict(key)
        if verdict is None:  # unknown: measure plain first (the safe mode), then probe the speculative one
            if prefilling or not b.plain.count or not self._may_probe():
                return False
            return self._probe(True)
        if verdict != b.verdict:
            b.verdict, b.probe_interval, b.steps_since_probe = verdict, MIN_PROBE_INTERVAL, 0
        b.steps_since_probe += 1
        if b.steps_since_probe >= b.probe_interval and not prefilling and self._may_probe():
            b.steps_since_probe = 0
            b.probe_interval = min(2 * b.probe_interval, MAX_PROBE_INTERVAL)
            b.probe_left = 1  # the first step after a switch is not measured
            return self._probe(not verdict)
        return verdict

    def verdict(self, key: int) -> bool | None:
        """Whether speculating pays in bucket `key`: g against its r, else inferred from the other buckets."""
        gain = self.gain
        if gain is None:
            return None
        own = self._buckets.get(key)
        if own is not None and own.ratio is not None:
            return gain > MARGIN * own.ratio
        ratios = [(other, MARGIN * b.ratio) for other, b in self._buckets.items() if b.ratio is not None]
        if any(other < key and gain <= r for other, r in ratios):  # losing is checked first: the safe side
            return False
        if any(other > key and gain > r for other, r in ratios):
            return True
        return None

    def record(self, num_running: int, speculated: bool, seconds: float, num_tokens: int) -> None:
        """A measured step: its mode, how long it took and how many tokens it generated."""
        if num_running == 0 or seconds <= 0:
            return
        b = self._buckets.setdefault(bucket_of(num_running), _Bucket())
        (b.spec if speculated else b.plain).add(seconds, num_tokens / num_running)
        (self._spec_tokens if speculated else self._plain_tokens).add(seconds, num_tokens / num_running)

    def summary(self) -> dict[int, dict[str, float | None]]:
        """Per bucket (its largest batch size): measured step times, r, and the verdict (None: unknown)."""
        return {
            2 ** (key - 1): {
                "spec_step_s": b.spec.seconds if b.spec.count else None,
                "plain_step_s": b.plain.seconds if b.plain.count else None,
                "ratio": b.ratio,
                "gain": self.gain,
                "speculate": self.verdict(key),
            }
            for key, b in sorted(self._buckets.items())
        }

    def _may_probe(self) -> bool:
        return self.num_probes < PROBE_ALLOWANCE + PROBE_SHARE * self.num_steps

    def _probe(self, speculate: bool) -> bool:
        self.num_probes += 1
        return speculate
