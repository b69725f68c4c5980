"""Metric names in PromQL expressions, and the syntax checks we can make without Prometheus.

Grafana's `$var` and `$__rate_interval` are accepted where PromQL takes a label value or a range.
"""

from __future__ import annotations

import re

KEYWORDS = {
    "and",
    "or",
    "unless",
    "by",
    "without",
    "on",
    "ignoring",
    "group_left",
    "group_right",
    "offset",
    "bool",
    "inf",
    "nan",
}
_STRING = re.compile(r'"(?:[^"\\]|\\.)*"')
_RANGE = re.compile(r"\[[^\]]*\]")
_LABELS = re.compile(r"\{[^}]*\}")
_GROUPING = re.compile(r"\b(by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)")
_IDENT = re.compile(r"(?<![0-9.a-zA-Z_:])[a-zA-Z_:][a-zA-Z0-9_:]*")
_OFFSET = re.compile(r"\boffset\s+-?[0-9a-z]+")
_DURATION = re.compile(r"^(\d+(ms|[smhdwy]))+$|^\$__\w+$|^\$\w+$")
_MATCHER = re.compile(r'^\s*[a-zA-Z_][a-zA-Z0-9_]*\s*(=|!=|=~|!~)\s*"(?:[^"\\]|\\.)*"\s*$')


def check_syntax(expr: str) -> None:
    """ValueError when brackets do not balance, a range is not a duration, or a label matcher is malformed."""
    depth = []
    pairs = {")": "(", "]": "[", "}": "{"}
    for ch in _STRING.sub('""', expr):
        if ch in "([{":
            depth.append(ch)
        elif ch in pairs:
            if not depth or depth.pop() != pairs[ch]:
                raise ValueError(f"unbalanced {ch!r} in {expr!r}")
    if depth:
        raise ValueError(f"unclosed {depth[-1]!r} in {expr!r}")
    for window in _RANGE.findall(expr):
        if not _DURATION.match(window[1:-1].strip()):
            raise ValueError(f"range {window} is not a duration in {expr!r}")
    for selector in _LABELS.findall(_STRING.sub(lambda m: m.group(0).replace("}", ""), expr)):
        body = selector[1:-1].strip()
        for matcher in filter(None, _split_matchers(body)):
            if not _MATCHER.match(matcher):
                raise ValueError(f"bad label matcher {matcher!r} in {expr!r}")


def _split_matchers(body: str) -> list[str]:
    parts, current, quoted = [], "", False
    for ch in body:
        if ch == '"':
            quoted = not quoted
        if ch == "," and not quoted:
            parts.append(current)
            current = ""
        else:
            current += ch
    return [*parts, current]


def metric_names(expr: str) -> set[str]:
    """Names of the series an expression selects (not functions, keywords, labels or numbers)."""
    text = _OFFSET.sub(" ", _GROUPING.sub(" ", _LABELS.sub(" ", _RANGE.sub(" ", _STRING.sub(" ", expr)))))
    names = set()
    for match in _IDENT.finditer(text):
        rest = text[match.end() :].lstrip()
        word = match.group(0)
        if rest.startswith("(") or word.lower() in KEYWORDS:
            continue
        if text[: match.start()].rstrip().endswith("$"):
            continue
        names.add(word)
    return names
