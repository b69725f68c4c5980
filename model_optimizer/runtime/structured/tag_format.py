"""vLLM's newer structural tag, `{"type": "structural_tag", "format": {...}}` (xgrammar's tree of formats),
as an llguidance Lark grammar.

The string-level formats are taken: `const_string`, `json_schema` (JSON style), `regex`, `grammar`,
`any_text` (with `excludes` and `max_chars`), `sequence`, `or`, `optional`, `plus`, `star`, `repeat`,
`tag` (a string begin, one end or a list of them), `triggered_tags` and `tags_with_separator` (with
`at_least_one` and `stop_after_first`). Free text inside a tag ends at the tag's end, as xgrammar has it.
The token-level formats, `dispatch`, the XML argument styles, `any_order` and `max_tokens` are refused
with their name (a 400), never approximated.
"""

from __future__ import annotations

import json
from typing import Any

from model_optimizer.runtime.structured.token_regex import (
    Segments,
    angles_literal,
    ascii_classes,
    joinable,
    lark_ascii_classes,
    lark_items,
    lark_of,
    slashes_escaped,
)

SUPPORTED = (
    "const_string",
    "json_schema",
    "regex",
    "grammar",
    "any_text",
    "sequence",
    "or",
    "optional",
    "plus",
    "star",
    "repeat",
    "tag",
    "triggered_tags",
    "tags_with_separator",
)


NEEDS = {
    "const_string": ("value",),
    "json_schema": ("json_schema",),
    "regex": ("pattern",),
    "grammar": ("grammar",),
    "sequence": ("elements",),
    "or": ("elements",),
    "optional": ("content",),
    "plus": ("content",),
    "star": ("content",),
    "repeat": ("content", "min", "max"),
    "tag": ("begin", "content", "end"),
    "triggered_tags": ("triggers", "tags"),
    "tags_with_separator": ("tags", "separator"),
}
"""The keys each format must have (xgrammar's; any_text needs none)."""


def check_format(node: Any, where: str = "format") -> None:
    """ValueError naming the first node that is malformed or not supported (no llguidance needed)."""
    if not isinstance(node, dict) or not isinstance(node.get("type"), str):
        raise ValueError(f"{where} must be an object with a type")
    kind = node["type"]
    if kind not in SUPPORTED:
        raise ValueError(
            f"{where}: the structural tag format {kind!r} is not supported (supported: {', '.join(SUPPORTED)})"
        )
    missing = [key for key in NEEDS.get(kind, ()) if key not in node]
    if missing:
        raise ValueError(f"{where}: a {kind} needs {' and '.join(missing)}")
    for key in ("min", "max"):
        if key in node and (not isinstance(node[key], int) or isinstance(node[key], bool)):
            raise ValueError(f"{where}.{key} must be an integer")
    if kind == "json_schema" and not isinstance(node["json_schema"], (dict, bool)):
        raise ValueError(f"{where}.json_schema must be a JSON schema (an object, or true/false)")
    for key in ("excludes", "triggers"):
        if key in node and not (isinstance(node[key], list) and all(isinstance(s, str) and s for s in node[key])):
            raise ValueError(f"{where}.{key} must be a list of non-empty strings")
    if kind == "json_schema" and (node.get("style", "json") != "json" or node.get("any_order")):
        raise ValueError(f"{where}: only the JSON style of json_schema is supported, in declared order")
    if kind == "any_text" and node.get("max_tokens") is not None:
        raise ValueError(f"{where}: any_text's max_tokens is not supported (max_chars is)")
    for key in ("value", "pattern", "grammar", "separator"):
        if key in node and not isinstance(node[key], str):
            raise ValueError(f"{where}.{key} must be a string")
    if kind == "tag":
        ends = node.get("end")
        if not isinstance(node.get("begin"), str) or not (
            isinstance(ends, str) or (isinstance(ends, list) and ends and all(isinstance(e, str) for e in ends))
        ):
            raise ValueError(f"{where}: a tag needs a string begin and an end (a string or a list of them)")
    children = {"content": [node.get("content")]} if "content" in node else {}
    for key in ("elements", "tags"):
        if key in node:
            if not isinstance(node[key], list) or not node[key]:
                raise ValueError(f"{where}.{key} must be a non-empty list")
            children[key] = node[key]
    for key, items in children.items():
        for i, child in enumerate(items):
            check_format(child, f"{where}.{key}[{i}]" if key != "content" else f"{where}.content")
    for key in ("tags",):
        for i, tag in enumerate(node.get(key, [])):
            if tag.get("type") != "tag":
                raise ValueError(f"{where}.tags[{i}] must be a tag")
    if kind == "triggered_tags":
        for i, tag in enumerate(node["tags"]):
            if not any(tag["begin"].startswith(t) for t in node.get("triggers", [])):
                raise ValueError(f"{where}.tags[{i}].begin {tag['begin']!r} starts with none of the triggers")


class LarkBuilder:
    """One format tree's rules; `segments(text)` cuts a literal at the added tokens the tokenizer has in it
    (forced as those tokens), `json_options` the JSON settings every schema carries."""

    def __init__(self, segments: Segments, json_options: dict[str, Any]) -> None:
        self.segments = segments
        self.json_options = json_options
        self.rules: list[str] = []
        self.grammars: list[dict[str, Any]] = []
        self._count = 0

    def grammar(self, root: dict[str, Any]) -> str:
        """The llguidance grammar (a list of grammars, JSON text) of the format tree `root`."""
        top = "\n".join(["%llguidance {}", f"start: {self.node(root)}", *self.rules])
        return json.dumps({"grammars": [{"lark_grammar": top}, *self.grammars]})

    def forced(self, text: str) -> str:
        """A literal as Lark items to force (tokens where the tokenizer has them); nothing for no text."""
        return lark_items(self.segments(text))

    def _rule(self, body: str, attributes: str = "") -> str:
        self._count += 1
        name = f"f{self._count}"
        self.rules.append(f"{name}{attributes}: {body}")
        return name

    def _terminal(self, body: str) -> str:
        self._count += 1
        name = f"F{self._count}"
        self.rules.append(f"{name}: {body}")
        return name

    def _text(self, node: dict[str, Any]) -> str:
        """any_text's terminal body: any characters (at most max_chars), none of `excludes` among them."""
        limit = node.get("max_chars")
        body = f"/(?s:.{{0,{int(limit)}}})/" if limit is not None else "/(?s:.*)/"
        excludes = node.get("excludes") or []
        if excludes:
            inner = "|".join(regex_literal(e) for e in excludes)
            body = f"{body} & ~/(?s:.*)({inner})(?s:.*)/"
        return body

    def node(self, node: dict[str, Any]) -> str:
        kind = node["type"]
        if kind == "const_string":
            return self.forced(node["value"]) or '""'
        if kind == "json_schema":
            schema = node["json_schema"]
            schema = {} if schema is True else schema
            return self._rule(f"%json {json.dumps({**schema, 'x-guidance': self.json_options})}")
        if kind == "regex":
            pattern = ascii_classes(angles_literal(node["pattern"]))
            lark = lark_of(pattern, self.segments)
            return self._rule(lark or self._terminal("/" + slashes_escaped(pattern) + "/"))
        if kind == "grammar":
            import llguidance as llg

            name = f"g{len(self.grammars)}"
            self.grammars.append(
                {"name": name, "lark_grammar": lark_ascii_classes(llg.grammar_from("grammar", node["grammar"]))}
            )
            return f"@{name}"
        if kind == "any_text":
            return self._rule(self._terminal(self._text(node)))
        if kind == "sequence":
            return self._rule(" ".join(self._sequence(node["elements"])))
        if kind == "or":
            return self._rule(" | ".join(self.node(e) for e in node["elements"]))
        if kind in ("optional", "plus", "star"):
            return self._rule(f"({self.node(node['content'])}){ {'optional': '?', 'plus': '+', 'star': '*'}[kind] }")
        if kind == "repeat":
            low, high = int(node["min"]), int(node["max"])
            return self._rule(f"({self.node(node['content'])}){{{low},{'' if high < 0 else high}}}")
        if kind == "tag":
            return self._tag(node, node["begin"])
        if kind == "triggered_tags":
            return self._triggered(node)
        return self._separated(node)

    def _tag(self, node: dict[str, Any], begin: str) -> str:
        """begin, content, one of the ends. Free text inside ends at the first end (a lazy lexeme that holds
        it); other content is followed by the end, forced (or chosen among the ends)."""
        ends = [node["end"]] if isinstance(node["end"], str) else node["end"]
        content = node["content"]
        head = self.forced(begin)
        marks = [self.forced(e) or '""' for e in ends]
        if content["type"] == "any_text" and any(m.startswith("<[") for m in marks):
            # an end that is a token (`</think>` as Qwen3 has it) ends the text before it by itself
            return self._rule(f"{head} {self._terminal(self._text(content))} ({' | '.join(marks)})".strip())
        if content["type"] == "any_text":
            until = "(" + "|".join(regex_literal(e) for e in ends) + ")"
            lazy = self._rule(self._terminal(f"({self._text(content)}) /{until}/"), "[lazy]")
            return self._rule(f"{head} {lazy}".strip())
        tails = [self.forced(e) for e in ends if e]  # an empty end: nothing after the content
        pattern = self._regex(content)
        if pattern is not None and tails and all("<[" not in t for t in tails):
            # a regex and the text of its end are one lexeme: llguidance's lexemes are greedy, so a `.*`
            # lexeme of its own would eat the end too and never stop. Lazy, so that the tag ends at its
            # first end, as free text does (greedy, `.*</a>` went on through the text after the tag on its
            # line), unless one end starts another (`</a>`, `</a>!`): lazy, the longer could never end it
            until = "|".join(regex_literal(e) for e in ends)
            lexeme = self._terminal(f"/{pattern}(?:{until})/")
            if not any(a != b and b.startswith(a) for a in ends for b in ends):
                lexeme = self._rule(lexeme, "[lazy]")
            return self._rule(f"{head} {lexeme}".strip())
        tail = f"({' | '.join(tails)}){'?' if len(tails) < len(ends) else ''}" if tails else ""
        return self._rule(f"{head} {self.node(content)} {tail}".strip())

    def _regex(self, node: dict[str, Any]) -> str | None:
        """The node as regex text for Lark's /.../ when it is plain text, a regex with no added token in it,
        or alternatives, repeats and sequences of those (joinable with what follows it into one lexeme),
        else None."""
        kind = node["type"]
        if kind == "const_string" and all(token is None for _, token in self.segments(node["value"])):
            return slashes_escaped(regex_literal(node["value"]))
        if (
            kind == "regex"
            and lark_of(pattern := ascii_classes(angles_literal(node["pattern"])), self.segments) is None
        ):
            joined = joinable(pattern)
            return f"(?:{slashes_escaped(joined)})" if joined is not None else None
        if kind in ("or", "sequence"):
            parts = [self._regex(e) for e in node["elements"]]
            if not parts or any(p is None for p in parts):
                return None
            return "(?:" + ("|" if kind == "or" else "").join(parts) + ")"  # type: ignore[arg-type]
        if kind in ("optional", "plus", "star", "repeat"):
            inner = self._regex(node["content"])
            if inner is None:
                return None
            if kind == "repeat":
                high = int(node["max"])
                return f"(?:{inner}){{{int(node['min'])},{'' if high < 0 else high}}}"
            return f"(?:{inner}){ {'optional': '?', 'plus': '+', 'star': '*'}[kind] }"
        return None

    def _sequence(self, elements: list[dict[str, Any]]) -> list[str]:
        """A sequence's items, each regex with the plain text and regexes after it joined into one lexeme
        (see _tag: a greedy lexeme must not stand before text it could eat)."""
        items: list[str] = []
        run: list[str] = []
        for element in [*elements, None]:
            pattern = self._regex(element) if element is not None else None
            if pattern is not None and (run or element["type"] != "const_string"):  # from a varying part on
                run.append(pattern)
                continue
            if run:
                items.append(self._terminal("/" + "".join(run) + "/"))
                run = []
            if element is not None:
                items.append(self.node(element))
        return items

    def _triggered(self, node: dict[str, Any]) -> str:
        text = self._terminal(self._text(node))
        dispatched = []
        for tag in node["tags"]:
            trigger = max((t for t in node["triggers"] if tag["begin"].startswith(t)), key=len)
            lead = self._lead(text, trigger)
            dispatched.append(self._rule(f"{lead} {self._tag(tag, tag['begin'][len(trigger) :])}"))
        any_tag = self._rule(" | ".join(dispatched))
        whole = self._rule(" | ".join(self._tag(tag, tag["begin"]) for tag in node["tags"]))  # no text before it
        first, after = node.get("at_least_one", False), node.get("stop_after_first", False)
        if first and after:
            return whole
        if after:
            return self._rule(f"{any_tag} | {text}")
        if first:
            return self._rule(f"{whole} ({any_tag})* {text}")
        return self._rule(f"({any_tag})* {text}")

    def _lead(self, text: str, trigger: str) -> str:
        """Free text (the terminal `text`) up to and with `trigger`. A token ends the text by itself; trigger
        text needs a lazy lexeme with the text, so that the text ends at its first occurrence. A trigger of
        text and tokens (`function call<|role_sep|>`) is its first piece so, the rest forced after it."""
        pieces = self.segments(trigger)
        first, token = pieces[0]
        if token is not None:
            return self._rule(f"{text} {lark_items(pieces)}")
        lead = self._rule(f"{text} {json.dumps(first)}", "[lazy]")
        return self._rule(f"{lead} {lark_items(pieces[1:])}") if len(pieces) > 1 else lead

    def _separated(self, node: dict[str, Any]) -> str:
        one = self._rule(" | ".join(self._tag(tag, tag["begin"]) for tag in node["tags"]))
        if node.get("stop_after_first", False):
            body = one
        else:
            body = f"{one} ({self.forced(node['separator']) or chr(34) * 2} {one})*"
        return self._rule(body if node.get("at_least_one", False) else f"({body})?")


_REGEX_SPECIAL = frozenset("\\.+*?()|[]{}^$-#&~/")


def regex_literal(text: str) -> str:
    """`text` as a regular expression (llguidance's syntax, inside Lark's /.../) that matches exactly it."""
    return "".join("\\" + c if c in _REGEX_SPECIAL else c for c in text)
