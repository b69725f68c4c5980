"""Scanning a text that grows: what a stream's tool-call views (tool_parsers.py and its siblings) read of
the text generated so far. A stream re-reads its whole text at every delta; `TextScans` holds the text a
view read and the searches and scans made of it, and a view of a text that extends it goes on where those
stopped, so each character is scanned about once (each answer is the one a fresh scan gives; a text that
does not extend the last one starts afresh). The scanning runs in compiled regular expressions, from one
string or bracket to the next.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any, TypeVar

_WS = " \t\r\n"


def skip_ws(text: str, i: int) -> int:
    while i < len(text) and text[i] in _WS:
        i += 1
    return i


def arriving(text: str, i: int, marker: str) -> bool:
    """Whether text[i:], to the end of the text, is a beginning of `marker` (which may still be arriving)."""
    return len(text) - i <= len(marker) and marker.startswith(text[i:])


class Scan:
    """The search for the end of what starts at text[start], resumable: `end` on a text that extends the
    one it read last goes on from where that search stopped."""

    def __init__(self, start: int) -> None:
        self.start = start
        self.at = start
        """Where the search goes on: what lies before has been read."""
        self.found: int | None = None
        """The end, once found: what arrives after it cannot move it."""

    def end(self, text: str) -> int | None:
        """Where it ends in `text` (as `go_on` says), or None while that has not arrived."""
        if self.found is None and self.start < len(text):
            self.found = self.go_on(text)
        return self.found

    def go_on(self, text: str) -> int | None:
        """Read on from `at` (moving it), and give the end once found."""
        raise NotImplementedError


class JsonValueScan(Scan):
    """The end (index just past it) of the JSON value at text[start]: from one string or bracket to the next,
    the scanning in C."""

    def __init__(self, start: int) -> None:
        super().__init__(start)
        self.depth = 0
        """Brackets open at `at`."""
        self.in_string = False
        """`at` lies inside a string, whose body has been read up to there."""

    def go_on(self, text: str) -> int | None:
        if text[self.start] not in '"{[':  # a number or literal, which may go on with the next characters
            self.at = _BARE_BODY.match(text, self.at).end()  # type: ignore[union-attr]
            return self.at if self.at < len(text) else None
        while True:
            if self.in_string:
                self.at = _STRING_BODY.match(text, self.at).end()  # type: ignore[union-attr]
                if self.at == len(text) or text[self.at] != '"':  # (a backslash at the end: its escape is arriving)
                    return None
                self.in_string, self.at = False, self.at + 1
                if self.depth == 0:
                    return self.at  # the value is a string
                continue
            found = _STRUCTURE.search(text, self.at)
            if found is None:
                self.at = len(text)
                return None
            self.at = found.end()
            if found.group() == '"':
                self.in_string = True
                continue
            self.depth += 1 if found.group() in "{[" else -1
            if self.depth == 0:
                return self.at


_STRUCTURE = re.compile(r'["{}\[\]]')
_STRING_BODY = re.compile(r'[^"\\]*(?:\\.[^"\\]*)*', re.DOTALL)
_BARE_BODY = re.compile(r"[^,}\] \t\r\n]*")
_T = TypeVar("_T")


class TextScans:
    """A text and the scans read of it, which go on where they stopped when a view reads a text that extends
    it: a stream re-reads its whole text at every delta, but scans each character about once. Each answer
    is the one a fresh scan of the text gives; a text that does not extend the last one starts afresh.
    A parser keeps one for the stream it reads (ToolParser.for_stream)."""

    def __init__(self, text: str = "") -> None:
        self.text = text
        self._finds: dict[tuple[str, int], int] = {}
        """(what, from where) -> where its search goes on: where it was found, else past where it could begin."""
        self._scans: dict[tuple[type[Scan], int], Scan] = {}
        """(kind, where the thing starts) -> the search for its end so far."""
        self._reads: dict[tuple[Callable, int], tuple[tuple, Any]] = {}
        """(reader, where the part it read starts) -> (its arguments, what it gave) the last time."""

    def read(self, text: str) -> TextScans:
        """These scans moved on to `text`: kept if it extends the text they read, else dropped."""
        if not text.startswith(self.text):
            self._finds.clear()
            self._scans.clear()
            self._reads.clear()
        self.text = text
        return self

    def find(self, sub: str, start: int) -> int:
        """text.find(sub, start), searching on from where the last such search stopped."""
        at = self.text.find(sub, self._finds.get((sub, start), start))
        self._finds[sub, start] = at if at != -1 else max(start, len(self.text) - len(sub) + 1)
        return at

    def end(self, kind: type[Scan], start: int) -> int | None:
        """kind(start).end(text)."""
        scan = self._scans.get((kind, start))
        if scan is None:
            scan = self._scans[kind, start] = kind(start)
        return scan.end(self.text)

    def value_end(self, i: int) -> int | None:
        """Index just past the JSON value starting at text[i], or None while it has not all arrived."""
        return self.end(JsonValueScan, i)

    def cached(self, at: int, read: Callable[..., _T], *args: Any) -> _T:
        """read(*args) of the part of the text at `at`, given back while the arguments are the last ones: a
        stream's views read each part again at every delta, and a whole argument's value reads the same."""
        kept = self._reads.get((read, at))
        if kept is None or kept[0] != args:
            kept = self._reads[read, at] = (args, read(*args))
        return kept[1]


def string_end(text: str, i: int) -> int | None:
    """Index past the JSON string opening at text[i], or None while it has not ended."""
    j = _STRING_BODY.match(text, i + 1).end()  # type: ignore[union-attr]
    return j + 1 if j < len(text) and text[j] == '"' else None
