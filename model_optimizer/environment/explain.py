"""`mopt doctor --explain`: match an error message against the knowledge base (data/errors.json)
and return the likely causes and fixes."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from functools import cache
from typing import Any

from model_optimizer.environment.knowledge import load


@dataclass
class Match:
    """One knowledge-base entry that fits the text."""

    id: str
    title: str
    causes: list[str]
    fix: dict[str, list[str]]
    matched: list[str] = field(default_factory=list)
    """The fragments of the text that matched the entry's patterns."""


@cache
def _compiled() -> list[tuple[dict[str, Any], list[re.Pattern[str]]]]:
    return [(e, [re.compile(p, re.IGNORECASE) for p in e["patterns"]]) for e in load("errors")["entries"]]


def entries() -> list[dict[str, Any]]:
    """The raw knowledge-base entries."""
    return list(load("errors")["entries"])


def explain(text: str) -> list[Match]:
    """Entries whose patterns occur in `text`, best first: more patterns matched, then file order; or the
    one entry whose id `text` is (the id the output names, e.g. `cuda_oom`)."""
    if not isinstance(text, str) or not text.strip():
        raise ValueError('--explain needs the error text, e.g. mopt doctor --explain "CUDA out of memory"')
    for entry, _ in _compiled():
        if entry["id"] == text.strip():
            return [Match(entry["id"], entry["title"], entry["causes"], entry["fix"], [entry["id"]])]
    scored = []
    for order, (entry, patterns) in enumerate(_compiled()):
        hits = [m.group(0) for p in patterns if (m := p.search(text))]
        if hits:
            scored.append((-len(hits), order, Match(entry["id"], entry["title"], entry["causes"], entry["fix"], hits)))
    return [m for _, _, m in sorted(scored, key=lambda s: (s[0], s[1]))]
