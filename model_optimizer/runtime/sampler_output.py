"""What the sampler reports for each sequence and step, in plain Python.

The torch sampler (layers/sampler.py) makes these; the engine core (engine/) consumes them and
never imports torch, so they live below both.
"""

from __future__ import annotations

from dataclasses import dataclass

NONFINITE_TOKEN = -1
"""The token id a runner reports for a request whose logits were NaN or inf: the request fails."""


@dataclass
class Logprob:
    """The chosen token's log-probability and the top-k alternatives at one step."""

    token_id: int
    logprob: float
    rank: int
    top: dict[int, float]
