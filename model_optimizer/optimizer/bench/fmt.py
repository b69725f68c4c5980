"""Numbers as people read them in reports: 12,345 tok/s, 85.2 ms, 3.14 req/s, 97.5 %.

Precision follows magnitude (about three significant digits, never a `1.192e+04`), thousands
get separators, and a missing figure is a dash.
"""

from __future__ import annotations

import math

MISSING = "-"


def number(value: float | int | None) -> str:
    """A figure with precision that follows its size: 12,345 / 85.2 / 3.14 / 0.0123."""
    if value is None or isinstance(value, bool):
        return MISSING if value is None else str(value)
    if isinstance(value, int):
        return f"{value:,}"
    if math.isnan(value):
        return MISSING
    if math.isinf(value):
        return "inf" if value > 0 else "-inf"
    size = abs(value)
    if size >= 100 or value == 0:
        return f"{value:,.0f}"
    if size >= 10:
        return f"{value:.1f}"
    if size >= 1:
        return f"{value:.2f}"
    return f"{value:.3g}"


def with_unit(value: float | int | None, unit: str) -> str:
    """`number(value)` followed by its unit, or a dash alone."""
    text = number(value)
    return text if text == MISSING else f"{text} {unit}"


def ms(value: float | None) -> str:
    return with_unit(value, "ms")


def percent(fraction: float | None) -> str:
    """A fraction in [0, 1] as a percentage with one decimal (100 % and 0 % exactly)."""
    if fraction is None:
        return MISSING
    pct = fraction * 100
    return f"{pct:.0f} %" if pct in (0, 100) else f"{pct:.1f} %"
