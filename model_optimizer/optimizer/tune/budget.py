"""What a study may spend: a number of measured trials, a time, or both (`--trials N`, `--time 30m`)."""

from __future__ import annotations

import math
from dataclasses import dataclass


@dataclass
class Budget:
    trials: int | None = None
    """Measured trials the study should hold in all (a resumed study counts the ones it has; an interrupted
    trial measured nothing and is not counted)."""
    time_s: float | None = None
    """Seconds this invocation may search."""

    def __post_init__(self) -> None:
        if self.trials is None and self.time_s is None:
            raise ValueError("give a budget: --trials N and/or --time 30m")
        if self.trials is not None and self.trials <= 0:
            raise ValueError(f"--trials must be a positive integer, got {self.trials}")
        if self.time_s is not None and not self.time_s > 0:
            raise ValueError(f"--time must be positive, got {self.time_s}")


def parse_duration(text: str) -> float:
    """`90`, `90s`, `30m`, `1.5h` -> seconds."""
    units = {"s": 1.0, "m": 60.0, "h": 3600.0}
    raw = text.strip().lower()
    scale = units.get(raw[-1:], None)
    number = raw[:-1] if scale else raw
    try:
        value = float(number) * (scale or 1.0)
    except ValueError:
        raise ValueError(f"--time takes seconds or a number with s, m or h (e.g. 30m), got {text!r}") from None
    if not (value > 0 and math.isfinite(value)):
        raise ValueError(f"--time must be positive, got {text!r}")
    return value
