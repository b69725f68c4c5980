"""Whether a step speculates: on where it pays, off where it does not, decided from measured steady steps.

Speculation trades compute for steps: each request computes 1 + k tokens to keep 1 + (accepted) of
them. At one or a few requests a step costs one read of the weights whatever its width, so that is
free; at high load the batch is already compute-bound, the extra tokens cost their full price, and
the synchronous step (engine/core.py) loses the overlap of host and device. No fixed threshold is
right for every model, GPU and acceptance rate, so the policy measures.

What it measures. Per batch-size bucket (running requests: 1, 2, 3-4, 5-8, ...) and mode, the last
WINDOW steady steps: tokens generated and seconds from the end of the previous step to the end of
this one (so the host's work between steps counts, which speculation exposes). A step is steady when
the step before it ran the same mode at the same bucket and neither computed prompt tokens; the
Speculator decides that. The first step after a switch is never steady: it pays for the other
mode's step still in flight, a draft model's catch-up over every token it has not seen, and the
first replay of a CUDA graph; charging those to a mode made a one-request engine judge speculation
from 18.6 ms steps whose steady cost is 7.3 ms. A mode's rate is mean tokens over the median step
time, so one slow step among MIN_SAMPLES does not decide.

What it decides, per bucket (`should_speculate`):
- a measured verdict: speculate when its rate beats the plain rate by MARGIN (a near tie goes to the
  plain mode, which keeps the host's work overlapped), judged again at each steady step of the winner
  against the loser's last steps, so a fall in acceptance turns speculation off within a few steps;
- else an inferred one: speculation only loses ground as the batch grows (the k extra tokens per
  request turn a weight-bound step compute-bound), so a smaller bucket that measured a loss rules
  this one out, and the next bucket up measuring a win rules it in (not further: at a fraction of that
  batch a step may cost otherwise, and a batch's tail keeps the requests that accepted least);
- else it explores: MIN_SAMPLES steady steps of each mode, the current mode first (no switch), at
  most MAX_EXPLORE_STEPS steps (a batch that keeps changing bucket gives few steady steps).
A guard ends speculating that was inferred or is being explored once its steady steps fall below the
plain mode's floor (a plain step here costs at most the measured plain step of this or a larger bucket,
and yields a token per request): after MIN_SAMPLES steps, or after one when EARLY_LOSS behind (steps
that ran eagerly instead of from a graph cost several plain steps). That is a verdict: plain.
Probes: a measured bucket re-measures its losing mode (MIN_SAMPLES fresh steady steps, at most
MAX_PROBE_STEPS; a probe of speculation ends at the guard's verdict, after one steady step when EARLY_LOSS
behind, as exploring does). The first comes once exploring the loser and the probe, which repeats it (switch
steps included: a draft model's catch-up over every token it has not seen), together cost FIRST_PROBE_BUDGET
of the steps before it, scaled by what the loser could gain: speculating yields at most 1 + k tokens a
request per step, so at its measured step time it reaches at best so many times the plain rate (on the
H200: a 1B draft that lost 3.4x at 64 requests, 1.6x; an n-gram lookup that lost at one request for want of
matches, 3.1x); a loser that could not win even so waits MAX_PROBE_INTERVAL steps. No sooner than
MIN_PROBE_INTERVAL; while the verdict holds, the interval doubles, and it is at least long enough that the
probe's cost (its time beyond what its tokens took in the winning mode) stays within PROBE_BUDGET of the
steps between probes. A step with prompt tokens to compute neither explores nor starts a probe: its cost is the prefill's;
while a bucket explores, such a step runs plain (it teaches nothing, and a verify step costs more).
`disable_by_batch_size` (vLLM's knob) turns speculation off from a size up, outright.

Pure Python, no torch, no clock: decisions follow from the recorded samples alone (the tests drive it
with given timings).
"""

from __future__ import annotations

import statistics
from collections import deque
from dataclasses import dataclass, field

from model_optimizer.runtime.spec_decode.config import SpeculativeConfig

MIN_SAMPLES = 3
"""Steady steps of a mode (per bucket) before its rate counts: the median of three ignores one outlier."""
WINDOW = 5
"""Most recent steady steps kept per mode and bucket."""
MAX_EXPLORE_STEPS = 16
"""Steps a bucket may spend finding its first verdict; then it judges from what it has (plain if nothing)."""
MARGIN = 1.05
"""Speculating must measure this much faster than not."""
MIN_PROBE_INTERVAL = 64
"""Steps of a bucket between a new verdict and the first probe of the losing mode."""
MAX_PROBE_INTERVAL = 8192
MAX_PROBE_STEPS = 8
"""A probe ends after MIN_SAMPLES steady steps of the losing mode, or after this many steps."""
PROBE_BUDGET = 0.005
"""Probes may cost at most this share of the time between them (the interval grows to keep it so)."""
FIRST_PROBE_BUDGET = 0.05
"""Exploring the loser and the first probe after a verdict may cost this share of the steps before that
probe, times the loser's most possible gain (see the module docstring): looser than PROBE_BUDGET, so an early
verdict taken before n-gram matches appeared is revisited within a short answer, while a loser that cost
much to explore (a draft model's catch-up, an eager step) and could gain little waits long (on the H200 a
useless 1B draft at 64 requests, probed ~200 steps after its verdict, cost a 388-step run ~0.12 s of 3.5)."""
EARLY_LOSS = 2.0
"""Speculation this many times slower than the plain floor after one steady step ends its trial (_spec_refuted)."""


@dataclass(frozen=True)
class StepSample:
    """One step as the policy sees it."""

    num_running: int
    speculated: bool
    seconds: float
    """From the end of the previous step to the end of this one."""
    num_tokens: int
    """Tokens the step generated (collected), over all requests."""
    steady: bool
    """Same mode and bucket as the step before it, and no prompt tokens in either (see the module docstring)."""


@dataclass
class _Window:
    """The last WINDOW steady steps of one mode at one bucket."""

    steps: deque = field(default_factory=lambda: deque(maxlen=WINDOW))
    """(seconds, tokens, running requests) per step."""

    def add(self, seconds: float, tokens: int, running: int) -> None:
        self.steps.append((seconds, tokens, running))

    @property
    def count(self) -> int:
        return len(self.steps)

    @property
    def step_seconds(self) -> float:
        return statistics.median(s for s, _, _ in self.steps) if self.steps else 0.0

    @property
    def mean_running(self) -> float:
        return statistics.fmean(n for _, _, n in self.steps) if self.steps else 0.0

    @property
    def tokens_per_s(self) -> float:
        """Mean tokens per step over the median step time; 0 with no steps."""
        if not self.steps or self.step_seconds <= 0:
            return 0.0
        return statistics.fmean(t for _, t, _ in self.steps) / self.step_seconds

    def excess(self, seconds: float, tokens: int) -> float:
        """Seconds that `tokens` took beyond what this window's rate would have taken (0 when not slower;
        all of them when the rate is unknown): what running the other mode cost."""
        rate = self.tokens_per_s
        return max(seconds - tokens / rate, 0.0) if rate > 0 else seconds


@dataclass
class _Probe:
    mode: bool
    """The mode being re-measured (the losing one)."""
    steps: int = 0
    seconds: float = 0.0
    tokens: int = 0


@dataclass
class _Bucket:
    spec: _Window = field(default_factory=_Window)
    plain: _Window = field(default_factory=_Window)
    verdict: bool | None = None
    """The measured verdict (True: speculate); None until both modes are measured (or exploring ran out)."""
    explore_steps: int = 0
    steps_since_probe: int = 0
    probe_interval: int = MIN_PROBE_INTERVAL
    probe: _Probe | None = None
    explored: dict = field(default_factory=lambda: {True: [0.0, 0], False: [0.0, 0]})
    """Mode -> [seconds, tokens] of every step while exploring: what the loser cost, for the first probe's interval."""

    def window(self, speculated: bool) -> _Window:
        return self.spec if speculated else self.plain

    def judge(self) -> bool:
        return self.spec.tokens_per_s > MARGIN * self.plain.tokens_per_s


def bucket_of(num_running: int) -> int:
    """1 -> 1, 2 -> 2, 3-4 -> 3, 5-8 -> 4, ...: batch sizes whose steps cost about the same."""
    return max(num_running - 1, 0).bit_length() + 1


class SpecPolicy:
    """Decides per step whether to speculate (see the module docstring)."""

    def __init__(self, config: SpeculativeConfig) -> None:
        self.config = config
        self._buckets: dict[int, _Bucket] = {}
        self._last_mode = False
        """The mode of the last recorded step: exploring stays in it when it can."""

    def should_speculate(self, num_running: int, prefilling: bool = False) -> bool:
        """Whether a step of `num_running` requests speculates; `prefilling`: some prompt tokens are still to
        compute (or requests wait to start), so the step explores and probes nothing."""
        limit = self.config.disable_by_batch_size
        if num_running == 0 or (limit is not None and num_running >= limit):
            return False
        if not self.config.adaptive:
            return True
        key = bucket_of(num_running)
        b = self._buckets.setdefault(key, _Bucket())
        if b.probe is not None:
            return b.probe.mode
        if b.verdict is None:
            inferred = self._inferred(key)
            return inferred if inferred is not None else self._explore(b, prefilling)
        if not prefilling:
            b.steps_since_probe += 1
            if b.steps_since_probe > b.probe_interval:
                b.steps_since_probe = 0
                b.probe = _Probe(not b.verdict)
                b.window(b.probe.mode).steps.clear()  # judged on fresh steps only
                return b.probe.mode
        return b.verdict

    def record(self, sample: StepSample) -> None:
        """A step has ended: keep it if steady, and account for it in a probe or an exploration."""
        self._last_mode = sample.speculated
        if sample.num_running == 0 or sample.seconds <= 0:
            return
        key = bucket_of(sample.num_running)
        b = self._buckets.setdefault(key, _Bucket())
        if sample.steady:
            b.window(sample.speculated).add(sample.seconds, sample.num_tokens, sample.num_running)
        if b.probe is not None:
            self._probe_step(key, b, b.probe, sample)
            return
        if b.verdict is None:
            spent = b.explored[sample.speculated]
            spent[0], spent[1] = spent[0] + sample.seconds, spent[1] + sample.num_tokens
            if sample.speculated and sample.steady and self._spec_refuted(key, b):
                self._first_verdict(b, False)
                return
        if b.spec.count >= MIN_SAMPLES and b.plain.count >= MIN_SAMPLES and (b.verdict is None or sample.steady):
            verdict = b.judge()  # the winner's newest steps against the loser's last ones
            if b.verdict is None:
                self._first_verdict(b, verdict)
            elif verdict != b.verdict:  # it fell behind: probe the new loser soon
                b.probe_interval, b.steps_since_probe = MIN_PROBE_INTERVAL, 0
            b.verdict = verdict

    def _explore(self, b: _Bucket, prefilling: bool) -> bool:
        if prefilling:  # no verdict to follow and nothing to learn: the mode that cannot lose much
            return False
        b.explore_steps += 1
        if b.explore_steps > MAX_EXPLORE_STEPS:  # out of steps: judge from what there is
            self._first_verdict(b, b.judge())
            return b.verdict
        missing = [mode for mode in (self._last_mode, not self._last_mode) if b.window(mode).count < MIN_SAMPLES]
        return missing[0] if missing else self._last_mode

    def _inferred(self, key: int) -> bool | None:
        """A verdict from measured buckets: a loss below this one or a win in the next one up (None: neither,
        or both). A win is not carried further down: at a fraction of the batch it was measured at a step
        may cost otherwise, and the requests still running at a batch's tail are the ones whose proposals
        were accepted least (the others finished first)."""
        lost_below = any(b.verdict is False for k, b in self._buckets.items() if k < key)
        above = self._buckets.get(key + 1)
        won_above = above is not None and above.verdict is True
        if lost_below == won_above:
            return None
        return won_above

    def _spec_refuted(self, key: int, b: _Bucket) -> bool:
        """Speculating here (inferred, or exploring) measured slower than the plain mode's floor: a plain step
        at this batch costs at most the median plain step of this or a larger bucket and yields a token per
        request. MIN_SAMPLES steps decide, or one when it is EARLY_LOSS times behind (a step that runs
        eagerly instead of from a graph costs several plain steps: no need to pay for three)."""
        floor = b.plain.tokens_per_s if b.plain.count >= MIN_SAMPLES else None
        if floor is None:
            measured = (w.plain for k, w in sorted(self._buckets.items()) if k > key and w.plain.count >= MIN_SAMPLES)
            plain = next(measured, None)
            if plain is None or plain.step_seconds <= 0:
                return False
            floor = b.spec.mean_running / plain.step_seconds
        rate = b.spec.tokens_per_s
        return rate <= MARGIN * floor if b.spec.count >= MIN_SAMPLES else rate * EARLY_LOSS < floor

    def _first_verdict(self, b: _Bucket, verdict: bool) -> None:
        """The bucket's first verdict. Its first probe comes when exploring the loser and re-measuring it (at
        what exploring cost, switch steps included: a draft model's catch-up) stay within FIRST_PROBE_BUDGET
        times what the loser could gain; MAX_PROBE_INTERVAL when speculation lost and could win at no acceptance."""
        b.verdict, b.steps_since_probe = verdict, 0
        winner = b.window(verdict)
        seconds, tokens = b.explored[not verdict]
        gain = 1.0 if verdict else self._spec_ceiling(b) - MARGIN
        if gain <= 0:
            b.probe_interval = MAX_PROBE_INTERVAL
            return
        if winner.tokens_per_s <= 0 or winner.step_seconds <= 0:
            b.probe_interval = MIN_PROBE_INTERVAL
            return
        affordable = 2 * winner.excess(seconds, tokens) / (FIRST_PROBE_BUDGET * gain * winner.step_seconds)
        b.probe_interval = int(min(max(MIN_PROBE_INTERVAL, affordable), MAX_PROBE_INTERVAL))

    def _spec_ceiling(self, b: _Bucket) -> float:
        """Speculation's best rate here over the plain rate: every proposal accepted (1 + k tokens a request)
        at its measured step time, which does not depend on acceptance (every row verifies k)."""
        spec, plain = b.spec, b.plain.tokens_per_s
        if spec.step_seconds <= 0 or plain <= 0:
            return float("inf")  # not measured: nothing rules a win out
        best = (1 + self.config.num_speculative_tokens) * spec.mean_running / spec.step_seconds
        return best / plain

    def _probe_step(self, key: int, b: _Bucket, probe: _Probe, sample: StepSample) -> None:
        probe.steps += 1
        probe.seconds += sample.seconds
        probe.tokens += sample.num_tokens
        refuted = probe.mode and sample.steady and self._spec_refuted(key, b)  # as when exploring: one step may do
        if not refuted and b.window(probe.mode).count < MIN_SAMPLES and probe.steps < MAX_PROBE_STEPS:
            return
        b.probe = None
        winner = b.window(not probe.mode)
        verdict = False if refuted else b.judge()
        if verdict != b.verdict:  # the other mode won: probe the new loser soon
            b.verdict, b.probe_interval = verdict, MIN_PROBE_INTERVAL
            return
        excess = winner.excess(probe.seconds, probe.tokens)
        affordable = excess / (PROBE_BUDGET * winner.step_seconds) if winner.step_seconds else 0.0
        b.probe_interval = int(min(max(2 * b.probe_interval, affordable), MAX_PROBE_INTERVAL))

    def summary(self) -> dict[int, dict]:
        """Per bucket (its largest batch size): tokens/s and median step time of each mode, verdict, probe interval."""
        return {
            2 ** (key - 1): {
                "spec_tokens_per_s": b.spec.tokens_per_s,
                "plain_tokens_per_s": b.plain.tokens_per_s,
                "spec_step_ms": 1e3 * b.spec.step_seconds,
                "plain_step_ms": 1e3 * b.plain.step_seconds,
                "verdict": b.verdict,
                "inferred": self._inferred(key) if b.verdict is None else None,
                "probe_interval": b.probe_interval,
            }
            for key, b in sorted(self._buckets.items())
        }
