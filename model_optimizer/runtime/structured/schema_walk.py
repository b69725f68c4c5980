"""One walk over a JSON schema's subschemas, for every pass that checks or rewrites them.

A schema is parsed JSON: its objects are schemas, except the values of the DATA keywords (JSON data,
never followed), and the objects under SCHEMA_MAPS keywords, whose keys are names, not keywords (a
property called `const` is still a schema). Every other value is followed, whatever its keyword, so a
keyword no pass names (`unevaluatedProperties`, `contentSchema`, a newer draft's) is walked as well.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

SCHEMA_MAPS = ("properties", "patternProperties", "$defs", "definitions", "dependentSchemas", "dependencies")
"""Keywords whose value maps names to schemas (`dependencies`: or to lists of names, in older drafts)."""
DATA = frozenset(("const", "enum", "default", "examples"))
"""Keywords whose values are JSON data, not schemas: nothing in them is checked or rewritten."""


def rebuilt(node: Any, change: Callable[[dict], dict]) -> Any:
    """A copy of `node` in which `change` has been applied to each schema object, its subschemas first;
    `change` gets that object's copy (its subschemas already rebuilt), may edit it, and returns what
    takes its place. The input is not changed. RecursionError past Python's depth (~300 levels of
    properties: one frame per level, a map of names taken inline)."""
    if isinstance(node, list):
        items = []
        for item in node:  # loops, not comprehensions: a comprehension is a frame of its own before 3.12
            items.append(rebuilt(item, change))
        return items
    if not isinstance(node, dict):
        return node
    out: dict = {}
    for key, value in node.items():
        if key in DATA:
            out[key] = value
        elif key in SCHEMA_MAPS and isinstance(value, dict):
            held = out[key] = {}
            for name, sub in value.items():
                held[name] = rebuilt(sub, change)
        else:
            out[key] = rebuilt(value, change)
    return change(out)


def subschemas(node: Any) -> Iterator[dict]:
    """Every schema object of `node`, each before its subschemas."""
    stack: list[tuple[Any, bool]] = [(node, False)]
    while stack:
        item, names = stack.pop()
        if isinstance(item, list):
            stack.extend((value, False) for value in reversed(item))
        elif isinstance(item, dict) and names:
            stack.extend((value, False) for value in reversed(item.values()))
        elif isinstance(item, dict):
            yield item
            stack.extend((value, key in SCHEMA_MAPS) for key, value in reversed(item.items()) if key not in DATA)
