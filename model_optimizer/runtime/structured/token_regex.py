"""A regex whose literal text spells a tag-like added token (Qwen's `<tool_call>`), as Lark with the token.

llguidance takes a tokenizer's added tokens that look like tags as special: no text holds them, only
`<[id]>` in a grammar matches them. Where a grammar forces their text, though, llguidance tokenizes
that text into the token and then refuses it, and the request failed with "the output left its
grammar". The model, like the tokenizer, writes the text as the one token. So the regex is cut at each
such token of its literal runs (`segments`: the run's text in pieces, each plain or one added token,
grammar._segments), the token written as `<[id]>`, and everything between two tokens stays one regex, the
run's other text with it: `a.*b<tool_call>x` is `/a.*b/ <[1026]> /x/`. (Literal text as lexemes of their
own would be wrong: llguidance's lexemes are greedy, so `/.*/ "b"` never lets the `.*` stop.) A regex
without such a run is left to llguidance as it is (`lark_of` gives None).

Literal runs are found through groups and alternations, and a group of one branch without a quantifier
counts as its items (`<tool_(call)>` is the token; `[0-9]+\\s*(\\n<tool_call>)` joins its newline to
the whitespace before it, and a regex before a group of alternatives with tokens goes into each
alternative); a token's text inside a class, under a quantifier or across alternatives is
not a run and stays as it was. Inline flags (`(?i)`) would not carry across the split, so a regex that
needs one and has flags is refused.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from dataclasses import dataclass

Segment = tuple[str, "int | None"]
"""A piece of literal text, and the added token it is (None: plain text)."""
Segments = Callable[[str], list[Segment]]


def angles_literal(pattern: str) -> str:
    """`pattern` with `\\<` and `\\>` written as the characters: escaped angle brackets are text in Python's
    and JavaScript's regexes (how clients write them, `\\<tool_call\\>`), word boundaries in llguidance's,
    which it refuses; so the regex means the same whether or not the tokenizer has the tag as a token."""
    if "\\<" not in pattern and "\\>" not in pattern:
        return pattern
    out, i = [], 0
    while i < len(pattern):
        if pattern[i] == "\\" and i + 1 < len(pattern):
            out.append(pattern[i + 1] if pattern[i + 1] in "<>" else pattern[i : i + 2])
            i += 2
        else:
            out.append(pattern[i])
            i += 1
    return "".join(out)


ASCII_CLASSES = "dw"
"""The classes a regex constraint takes as ASCII: `\\d` is [0-9] and `\\w` [0-9a-zA-Z_] (`\\D`, `\\W` their
complements), inside character classes too. llguidance reads a JSON schema's `pattern` so (JSON Schema's,
ECMA-262's, semantics, where `\\s` is Unicode whitespace, as it is here), but its own regexes and Lark's
/.../ as Rust's, Unicode throughout (`\\d` took Arabic-Indic digits): `ascii_classes` gives every regex
the schema's reading, through llguidance's own translator."""


def ascii_classes(pattern: str) -> str:
    """`pattern` with ASCII_CLASSES written as their ASCII classes (`[\\d_]` is `[[0-9]_]`) and each
    unescaped `/` escaped (the same regex; Lark's /.../ needs it)."""
    import llguidance as llg

    return llg.regex_to_lark(pattern, ASCII_CLASSES)


def lark_ascii_classes(lark: str) -> str:
    """A Lark grammar with `ascii_classes` applied to each of its /regex/ terminals; its strings, `//`
    comments and `%json {...}` schemas (the schema's patterns are read so already) stay as they are."""
    out: list[str] = []
    i, n = 0, len(lark)
    while i < n:
        c = lark[i]
        if c == '"':  # a string: to its closing quote
            end = i + 1
            while end < n and lark[end] not in '"\n':
                end += 2 if lark[end] == "\\" else 1
            out.append(lark[i : end + 1])
            i = end + 1
        elif lark.startswith("//", i):  # a comment: to the end of its line
            end = lark.find("\n", i)
            end = n if end < 0 else end
            out.append(lark[i:end])
            i = end
        elif c == "/":  # a regex: to its closing slash
            end = i + 1
            while end < n and lark[end] not in "/\n":
                end += 2 if lark[end] == "\\" else 1
            if end >= n or lark[end] != "/":  # not a regex after all: llguidance says what is wrong
                out.append(lark[i:])
                break
            out.append("/" + ascii_classes(lark[i + 1 : end]) + "/")
            i = end + 1
        else:
            out.append(c)
            i += 1
    return "".join(out)


def lark_items(segments: list[Segment]) -> str:
    """The pieces as Lark items to force: string literals, `<[id]>` for the tokens."""
    return " ".join(f"<[{token}]>" if token is not None else json.dumps(text) for text, token in segments)


_GROUP = re.compile(r"\((\?:|\?P?<[A-Za-z_]\w*>)?")
_QUANTIFIER = re.compile(r"(?:[*+?]|\{\d+(?:,\d*)?\})[?+]?")
_CONTROL = {"n": "\n", "t": "\t", "r": "\r", "f": "\f", "v": "\v"}
_BRACED = "pPxuU"  # escapes that may take {...}


@dataclass
class _Item:
    source: str
    """The item's regex text, its quantifier included."""
    char: str | None = None
    """The character a literal, unquantified item matches."""
    branches: list[list[_Item]] | None = None
    """A group's alternatives (plain, non-capturing or named)."""
    quantifier: str = ""


class _Parser:
    def __init__(self, pattern: str) -> None:
        self.pattern = pattern
        self.i = 0
        self.flags = False

    def alternatives(self) -> list[list[_Item]]:
        branches = [self.sequence()]
        while self._peek() == "|":
            self.i += 1
            branches.append(self.sequence())
        return branches

    def sequence(self) -> list[_Item]:
        items = []
        while self.i < len(self.pattern) and self._peek() not in "|)":
            items.append(self.item())
        return items

    def _peek(self) -> str:
        return self.pattern[self.i] if self.i < len(self.pattern) else ""

    def item(self) -> _Item:
        start, c = self.i, self.pattern[self.i]
        char, branches = None, None
        if c == "(":
            opening = _GROUP.match(self.pattern, self.i)
            if opening.group(1) is None and self.pattern.startswith("(?", self.i):
                self.flags = True  # (?i), (?i:...), lookarounds: parsed through, never split
                self.i += 2
                self.alternatives()
            else:
                self.i = opening.end()
                branches = self.alternatives()
            if self._peek() != ")":
                raise ValueError(f"unbalanced parenthesis at {start}")
            self.i += 1
        elif c == "[":
            self._class()
        elif c == "\\":
            char = self._escape()
        else:
            self.i += 1
            char = None if c in ".^$" else c
        quantifier = _QUANTIFIER.match(self.pattern, self.i)
        text = quantifier.group(0) if quantifier else ""
        self.i += len(text)
        return _Item(self.pattern[start : self.i], None if text else char, branches, text)

    def _escape(self) -> str | None:
        if self.i + 1 >= len(self.pattern):
            raise ValueError("the pattern ends in a backslash")
        e = self.pattern[self.i + 1]
        self.i += 2
        if e in _BRACED and self._peek() == "{":
            end = self.pattern.find("}", self.i)
            self.i = len(self.pattern) if end < 0 else end + 1
        elif e in "xuU":
            self.i += {"x": 2, "u": 4, "U": 8}[e]
        elif e in "pP":
            self.i += 1
        if e.isalnum():
            return _CONTROL.get(e)
        return e

    def _class(self) -> None:
        depth, self.i = 1, self.i + 1
        if self._peek() == "^":
            self.i += 1
        if self._peek() == "]":
            self.i += 1
        while depth:
            if self.i >= len(self.pattern):
                raise ValueError("unterminated character class")
            c = self.pattern[self.i]
            if c == "\\":
                self.i += 1
            elif c == "[":
                depth += 1
            elif c == "]":
                depth -= 1
            self.i += 1


class _Writer:
    def __init__(self, segments: Segments) -> None:
        self.segments = segments
        self.tokens = 0

    def branches(self, branches: list[list[_Item]]) -> str:
        return " | ".join(self.sequence(items) or '""' for items in branches)

    def sequence(self, items: list[_Item]) -> str:
        pieces: list[str] = []
        regex: list[str] = []
        run: list[_Item] = []

        def end_regex() -> None:
            if regex:
                pieces.append("/" + "".join(regex) + "/")
                regex.clear()

        def end_run() -> None:
            text = "".join(item.char for item in run)  # type: ignore[misc]
            parts = self.segments(text) if text else []
            if all(token is None for _, token in parts):
                regex.extend(slashes_escaped(item.source) for item in run)
            elif "".join(piece for piece, _ in parts) != text:  # pieces that do not spell the run: forced
                self.tokens += 1
                end_regex()
                pieces.append(lark_items(parts))
            else:
                self.tokens += 1
                at = 0
                for piece, token in parts:  # each piece's items, as the pattern wrote them
                    if token is None:
                        regex.extend(slashes_escaped(item.source) for item in run[at : at + len(piece)])
                    else:
                        end_regex()
                        pieces.append(f"<[{token}]>")
                    at += len(piece)
            run.clear()

        for item in _inlined(items):
            if item.char is not None:
                run.append(item)
                continue
            end_run()
            before = self.tokens
            inner = self.branches(item.branches) if item.branches is not None else ""
            if self.tokens > before and regex and not item.quantifier:
                # the regex before a group of alternatives that hold tokens goes into each alternative, so
                # that it joins the text before each one's token (`\s*(\n<T>|\r<T>)`: apart, the greedy
                # `\s*` took the newline); the written regex text is taken as one item, as it stands
                before_group = _Item("".join(regex))
                regex.clear()
                pieces.append(f"({self.branches([[before_group, *branch] for branch in item.branches])})")
            elif self.tokens > before:
                end_regex()
                pieces.append(f"({inner}){_eager(item.quantifier)}")
            else:
                regex.append(slashes_escaped(item.source))
        end_run()
        end_regex()
        return " ".join(pieces)


def _inlined(items: list[_Item]) -> list[_Item]:
    """The items with each group of one branch and no quantifier replaced by its own items (the same
    language): the text before a token inside such a group joins the regexes before the group, so that
    a greedy `\\s*` there cannot take the group's leading newline in a lexeme of its own."""
    out: list[_Item] = []
    for item in items:
        if item.branches is not None and len(item.branches) == 1 and not item.quantifier:
            out.extend(_inlined(item.branches[0]))
        else:
            out.append(item)
    return out


def lark_of(pattern: str, segments: Segments) -> str | None:
    """A Lark expression for `pattern` with the tokens its literal runs spell (`segments(text)`: the text in
    pieces, each plain or one added token); None when no run spells one, or the pattern does not parse
    (llguidance then says why). ValueError for one that would need splitting but has inline flags."""
    parsed = _parsed(pattern)
    if parsed is None:
        return None  # llguidance says what is wrong with it
    parser, branches = parsed
    writer = _Writer(segments)
    expression = writer.branches(branches)
    if not writer.tokens:
        return None
    if parser.flags:
        raise ValueError("a regex that spells a tag token (written as the token) cannot also hold inline flags")
    return expression


def joinable(pattern: str) -> str | None:
    """`pattern` without its edge anchors, as regex text that another regex may follow inside one lexeme;
    None where it cannot be joined as it is: it does not parse on its own (`a)|(b` would escape its group),
    holds inline flags (`(?x)` would read what follows as a comment) or anchors elsewhere (`^a$|^b$`)."""
    parsed = _parsed(pattern)
    if parsed is None or parsed[0].flags or _anchored(parsed[1]):
        return None
    return parsed[0].pattern


def _parsed(pattern: str) -> tuple[_Parser, list[list[_Item]]] | None:
    """The pattern without its edge anchors (the grammar matches the whole output anyway; an escaped `$`
    stays), parsed into its branches; None when it does not parse, or not to its end."""
    body = pattern[:-1]
    if pattern.endswith("$") and (len(body) - len(body.rstrip("\\"))) % 2 == 0:
        pattern = body
    parser = _Parser(pattern.removeprefix("^"))
    try:
        branches = parser.alternatives()
    except ValueError:
        return None
    return (parser, branches) if parser.i == len(parser.pattern) else None


def _anchored(branches: list[list[_Item]]) -> bool:
    """Whether any item of these branches is an anchor (`^`, `$`)."""
    return any(
        item.source.rstrip("*+?{},0123456789") in ("^", "$") or (item.branches is not None and _anchored(item.branches))
        for items in branches
        for item in items
    )


def _eager(quantifier: str) -> str:
    """A quantifier without its lazy (or possessive) mark: Lark has none, and the language is the same."""
    return quantifier[:-1] if len(quantifier) > 1 and quantifier[-1] in "?+" else quantifier


def slashes_escaped(source: str) -> str:
    """Regex text inside Lark's /.../: each unescaped slash escaped."""
    out, i = [], 0
    while i < len(source):
        step = 2 if source[i] == "\\" else 1
        out.append("\\/" if source[i] == "/" else source[i : i + step])
        i += step
    return "".join(out)
