"""What the server refuses or tightens in a JSON schema before llguidance compiles it.

- Integers llguidance cannot keep are refused (ValueError): a bound outside 64 bits (it clamps it to
  int64, so a minimum of 10**19 gave 9223372036854775807), and a `const` or `enum` integer, or a bound
  that is both minimum and maximum, that a double cannot hold exactly (it writes it rounded: a const of
  2**53 + 1 gave 9007199254740992).
- The `date-time`, `date` and `time` formats become patterns of the values Python reads (pydantic, so the
  openai client's `parse`, and `datetime.fromisoformat`): llguidance's formats follow RFC 3339, whose
  leap second (`23:59:60`) and year 0000 Python refuses, and whose lowercase `t` and `z`
  `fromisoformat` refuses; and its dates take February 29th in any year. The output stays valid under
  the schema as the client sent it; only fewer values are possible. A node that has a `pattern` of its
  own keeps its format.
"""

from __future__ import annotations

from typing import Any

from model_optimizer.runtime.structured.schema_walk import rebuilt, subschemas

INT64 = (-(2**63), 2**63 - 1)
BOUNDS = ("minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum")
_INEXACT = "an integer that the grammar engine holds as a double and would write rounded"

_YEAR = "(?:[0-9]{3}[1-9]|[0-9]{2}[1-9]0|[0-9][1-9]00|[1-9]000)"  # 0001-9999
_LEAP_YEAR = "(?:[0-9]{2}(?:0[48]|[2468][048]|[13579][26])|(?:0[48]|[2468][048]|[13579][26])00)"
_MONTH_DAY = (
    "(?:(?:0[13578]|1[02])-(?:0[1-9]|[12][0-9]|3[01])|(?:0[469]|11)-(?:0[1-9]|[12][0-9]|30)"
    "|02-(?:0[1-9]|1[0-9]|2[0-8]))"
)
_DATE = f"(?:{_YEAR}-{_MONTH_DAY}|{_LEAP_YEAR}-02-29)"
_TIME = "(?:[01][0-9]|2[0-3]):[0-5][0-9]:[0-5][0-9](?:\\.[0-9]+)?(?:Z|[+-](?:[01][0-9]|2[0-3]):[0-5][0-9])"
FORMAT_PATTERNS = {"date": f"^{_DATE}$", "time": f"^{_TIME}$", "date-time": f"^{_DATE}T{_TIME}$"}
"""The formats made patterns, anchored (JSON Schema's patterns match anywhere unless anchored)."""


def prepare(schema: Any) -> Any:
    """`schema` (parsed JSON) checked and with its date and time formats made patterns; ValueError for an
    integer llguidance cannot keep. The input is not changed."""
    for node in subschemas(schema):
        _check_integers(node)
    return rebuilt(schema, _format_as_pattern)


def _format_as_pattern(node: dict) -> dict:
    pattern = FORMAT_PATTERNS.get(node.get("format")) if isinstance(node.get("format"), str) else None
    if pattern is not None and "pattern" not in node:
        del node["format"]
        node["pattern"] = pattern
    return node


def _check_integers(node: dict) -> None:
    """ValueError for an integer of this schema object (not of its subschemas) that llguidance cannot keep."""
    for key, value in node.items():
        if key in BOUNDS and _is_int(value):
            if not INT64[0] <= value <= INT64[1]:
                raise ValueError(f"{key} {value} is outside 64-bit integers, which the grammar engine cannot enforce")
        elif key in ("const", "enum"):
            inexact = _inexact_integer(value)
            if inexact is not None:
                raise ValueError(f"{key} holds {inexact}, {_INEXACT}")
    pinned = node.get("minimum")
    if _is_int(pinned) and pinned == node.get("maximum") and _inexact_integer(pinned) is not None:
        raise ValueError(f"minimum and maximum are both {pinned}, {_INEXACT}")


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _inexact_integer(data: Any) -> int | None:
    """The first integer in JSON data (nested ones included) that a double cannot hold exactly, if any."""
    if _is_int(data):
        try:
            return None if float(data) == data else data
        except OverflowError:
            return data
    values = data.values() if isinstance(data, dict) else data if isinstance(data, list) else ()
    return next((found for value in values if (found := _inexact_integer(value)) is not None), None)
