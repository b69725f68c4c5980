"""DecodeStallBound: how many prefill tokens a step may take so that running streams keep their pace.

A long prompt is cut into chunks (chunked prefill), but the token budget alone does not bound how
long a step takes: on a CPU a 2,000-token chunk is seconds, and every decoding stream waits that long
for its next token. So the engine core times its steps and keeps two estimates: what a decode-only
step takes, and what each prefill token adds. While some request decodes, a step's prefill tokens are
capped so that the step is expected to take at most `ratio` times a decode-only step; the long prompt
proceeds in smaller chunks and the streams' inter-token time stays within `ratio` of their pace alone.
"""

from __future__ import annotations

from dataclasses import dataclass

EMA = 0.2
"""Weight of the newest step in each estimate: a few steps follow a change of batch size."""


@dataclass
class DecodeStallBound:
    ratio: float
    """Longest step allowed while requests decode, as a multiple of a decode-only step (> 1)."""
    min_tokens: int = 16
    """Prefill tokens a step may always take, however slow: long prompts always progress."""
    probe_tokens: int = 64
    """The cap before any prefill has been timed (it measures the cost of a prefill token)."""
    decode_s: float | None = None
    """Seconds a decode-only step takes (moving average)."""
    prefill_token_s: float | None = None
    """Seconds each prefill token adds to a step (moving average)."""

    def __post_init__(self) -> None:
        if not self.ratio > 1:
            raise ValueError(f"max_decode_stall must be above 1 (0 turns it off), got {self.ratio!r}")

    def observe(self, seconds: float, num_prefill_tokens: int) -> None:
        """Learn from one step that took `seconds` and computed `num_prefill_tokens` prompt tokens."""
        if num_prefill_tokens == 0:
            self.decode_s = seconds if self.decode_s is None else (1 - EMA) * self.decode_s + EMA * seconds
            return
        if self.decode_s is None:
            return  # the part that is prefill is unknown yet
        per_token = max(seconds - self.decode_s, 0.0) / num_prefill_tokens
        self.prefill_token_s = (
            per_token if self.prefill_token_s is None else (1 - EMA) * self.prefill_token_s + EMA * per_token
        )

    def max_prefill_tokens(self) -> int:
        """Prefill tokens the next step may take while requests decode."""
        if self.decode_s is None or self.prefill_token_s is None:
            return self.probe_tokens
        if self.prefill_token_s <= 0:
            return 1 << 30
        allowed = (self.ratio - 1) * self.decode_s / self.prefill_token_s
        return max(self.min_tokens, int(allowed))
