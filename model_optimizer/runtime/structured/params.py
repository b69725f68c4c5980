"""StructuredOutputs: the constraint a request puts on its output, as plain data.

It travels inside SamplingParams from the frontend to the engine core (msgpack through msgspec,
which rebuilds it with the same checks), so it holds only strings and a flag: the grammar engine
(llguidance) is imported where grammars are compiled (grammar.py), never here.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

KINDS = ("json", "json_object", "regex", "choice", "grammar", "structural_tag")
"""json: a JSON schema; json_object: any JSON object; regex: a regular expression the whole output
matches; choice: one of a list of strings; grammar: a context-free grammar (Lark, or llama.cpp's GBNF);
structural_tag: free text in which each trigger, once written, starts one of its structures (its
`begin`, a JSON document valid under its schema, its `end`), as vLLM's structural tags."""
JSON_KINDS = ("json", "json_object", "structural_tag")
"""The kinds whose output is (or holds) JSON: the whitespace settings apply to them."""


@dataclass(frozen=True)
class StructuredOutputs:
    """One constraint on a request's output (vLLM's `structured_outputs`); frozen, so it is its own cache key.

    Build one with `StructuredOutputs.json(schema)`, `.json_object()`, `.regex(pattern)`,
    `.choice(options)`, `.grammar(text)` or `.structural_tag(structures, triggers)`."""

    kind: str
    """One of KINDS."""
    spec: str = ""
    """json: the schema as JSON text; choice: the options as a JSON list of strings; regex: the
    pattern; grammar: the grammar text; json_object: empty; structural_tag: {"structures": [{"begin",
    "schema", "end"}, ...], "triggers": [...]} as JSON text."""
    whitespace_flexible: bool = False
    """JSON_KINDS only (a structural tag's schemas): allow a run of up to grammar.WHITESPACE_RUN whitespace
    characters between JSON tokens (enough to pretty-print). Off, JSON comes out compact, as OpenAI's
    structured outputs return it: small models given free whitespace tend to spend their whole budget on it."""
    whitespace_pattern: str = ""
    """The same kinds: a regular expression for the whitespace allowed between JSON tokens (vLLM's
    `whitespace_pattern`), instead of either choice above; empty: not set."""
    reasoning_end: str = ""
    """Set: the constraint applies after a reasoning block, as vLLM's does with a reasoning parser. The
    output is free text up to and including this tag (e.g. `</think>`), then up to four whitespace
    characters, then what `kind` and `spec` say; the server sets it from --reasoning-parser and the prompt."""
    reasoning_start: str = ""
    """With reasoning_end: the block is optional and opens with this tag (e.g. `<think>`); empty: the
    output starts inside the block (the prompt opened it, or the model's format always has one)."""

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(f"structured output kind must be one of {', '.join(KINDS)}, got {self.kind!r}")
        if not isinstance(self.spec, str):
            raise ValueError(f"structured output spec must be a string, got {type(self.spec).__name__}")
        if not isinstance(self.whitespace_flexible, bool):
            raise ValueError("whitespace_flexible must be true or false")
        if not isinstance(self.whitespace_pattern, str):
            raise ValueError("whitespace_pattern must be a string (a regular expression)")
        if not isinstance(self.reasoning_end, str) or not isinstance(self.reasoning_start, str):
            raise ValueError("reasoning_start and reasoning_end must be strings")
        if self.reasoning_start and not self.reasoning_end:
            raise ValueError("reasoning_start needs reasoning_end: the tag that closes the block")
        if self.whitespace_pattern and self.kind not in JSON_KINDS:
            raise ValueError(f"whitespace_pattern applies to JSON ({', '.join(JSON_KINDS)}), not to {self.kind}")
        if self.kind == "json":
            schema = json_text(self.spec, "the JSON schema")
            if not isinstance(schema, (dict, bool)):
                raise ValueError("a JSON schema must be an object (or true/false)")
        elif self.kind == "choice":
            options = json_text(self.spec, "the choices")
            if not isinstance(options, list) or not options or not all(isinstance(o, str) and o for o in options):
                raise ValueError("choice must be a non-empty list of non-empty strings")
        elif self.kind in ("regex", "grammar") and not self.spec:
            raise ValueError(f"{self.kind} must not be empty")
        elif self.kind == "structural_tag":
            tag = json_text(self.spec, "structural_tag")
            if isinstance(tag, dict) and "format" in tag:
                from model_optimizer.runtime.structured.tag_format import check_format

                check_format(tag["format"])
            else:
                structures_of(self.spec)

    @classmethod
    def json(
        cls, schema: dict | bool | str, whitespace_flexible: bool = False, whitespace_pattern: str = ""
    ) -> StructuredOutputs:
        text = schema if isinstance(schema, str) else json.dumps(schema, separators=(",", ":"))
        return cls("json", text, whitespace_flexible, whitespace_pattern)

    @classmethod
    def json_object(cls, whitespace_flexible: bool = False, whitespace_pattern: str = "") -> StructuredOutputs:
        return cls("json_object", "", whitespace_flexible, whitespace_pattern)

    @classmethod
    def regex(cls, pattern: str) -> StructuredOutputs:
        return cls("regex", pattern)

    @classmethod
    def choice(cls, options: list[str]) -> StructuredOutputs:
        if isinstance(options, str):  # list("abc") would be the choices a, b and c
            raise ValueError(f"choice takes a list of strings, got the string {options!r}")
        return cls("choice", json.dumps(list(options)))

    @classmethod
    def grammar(cls, text: str) -> StructuredOutputs:
        return cls("grammar", text)

    @classmethod
    def structural_tag(
        cls,
        structures: list[dict[str, Any]],
        triggers: list[str],
        whitespace_flexible: bool = False,
        whitespace_pattern: str = "",
    ) -> StructuredOutputs:
        """Free text, where writing a trigger starts one of the structures whose `begin` starts with it:
        the rest of its `begin`, then JSON valid under its `schema`, then its `end`."""
        text = json.dumps({"structures": structures, "triggers": triggers}, separators=(",", ":"))
        return cls("structural_tag", text, whitespace_flexible, whitespace_pattern)

    @classmethod
    def tag_format(
        cls, tag_format: dict[str, Any], whitespace_flexible: bool = False, whitespace_pattern: str = ""
    ) -> StructuredOutputs:
        """vLLM's newer structural tag: a tree of formats (structured/tag_format.py says which)."""
        text = json.dumps({"format": tag_format}, separators=(",", ":"))
        return cls("structural_tag", text, whitespace_flexible, whitespace_pattern)

    @classmethod
    def from_dict(cls, value: dict[str, Any]) -> StructuredOutputs:
        """From vLLM's dict shape: exactly one of json, regex, choice, grammar, json_object (true),
        structural_tag (an object or its JSON text), and optionally whitespace_flexible and
        whitespace_pattern (the Python API's, `mopt generate`'s JSONL lines)."""
        kinds = {"json", "regex", "choice", "grammar", "json_object", "structural_tag"}
        unknown = set(value) - kinds - {"whitespace_flexible", "whitespace_pattern"}
        if unknown:
            raise ValueError(
                f"structured_outputs keys are {', '.join(sorted(kinds))}, got {', '.join(sorted(unknown))}"
            )
        given = [k for k in sorted(kinds) if value.get(k) not in (None, False)]
        if len(given) != 1:
            raise ValueError(
                "structured_outputs needs exactly one of json, regex, choice, grammar, json_object or structural_tag"
            )
        kind, flexible = given[0], value.get("whitespace_flexible", False)
        pattern = value.get("whitespace_pattern") or ""
        if kind == "json":
            return cls.json(value["json"], flexible, pattern)
        if kind == "json_object":
            return cls.json_object(flexible, pattern)
        if kind == "choice":
            return cls.choice(value["choice"])
        if kind == "structural_tag":
            tag = value["structural_tag"]
            tag = json_text(tag, "structural_tag") if isinstance(tag, str) else tag
            if not isinstance(tag, dict):
                raise ValueError("structural_tag must be an object with structures and triggers")
            if "format" in tag:
                return cls.tag_format(tag["format"], flexible, pattern)
            structures, triggers = tag.get("structures"), tag.get("triggers")
            return cls.structural_tag(structures, triggers, flexible, pattern)  # type: ignore[arg-type]
        return cls(kind, value[kind], whitespace_pattern=pattern)

    def describe(self) -> str:
        """A short name for logs and errors: the kind and the first characters of the spec."""
        spec = self.spec if len(self.spec) <= 60 else self.spec[:57] + "..."
        return f"{self.kind} {spec}".strip()


def structures_of(spec: str) -> list[tuple[str, dict[str, Any] | bool, str, str]]:
    """A structural tag's spec as (trigger, schema, begin, end) per structure, its trigger the longest one
    its begin starts with; ValueError naming what is malformed."""
    tag = json_text(spec, "structural_tag")
    if not isinstance(tag, dict) or set(tag) - {"structures", "triggers", "type"}:
        raise ValueError("structural_tag must be an object with structures and triggers")
    structures, triggers = tag.get("structures"), tag.get("triggers")
    if not isinstance(triggers, list) or not triggers or not all(isinstance(t, str) and t for t in triggers):
        raise ValueError("structural_tag.triggers must be a non-empty list of non-empty strings")
    if not isinstance(structures, list) or not structures:
        raise ValueError("structural_tag.structures must be a non-empty list")
    out = []
    for i, item in enumerate(structures):
        where = f"structural_tag.structures[{i}]"
        if not isinstance(item, dict) or set(item) - {"begin", "schema", "end"}:
            raise ValueError(f"{where} must be an object with begin, schema and end")
        begin, schema, end = item.get("begin"), item.get("schema", True), item.get("end", "")
        if not isinstance(begin, str) or not isinstance(end, str):
            raise ValueError(f"{where}: begin and end must be strings")
        if not isinstance(schema, (dict, bool)):
            raise ValueError(f"{where}.schema must be a JSON schema (an object, or true/false)")
        starts = [t for t in triggers if begin.startswith(t)]
        if not starts:
            raise ValueError(f"{where}.begin {begin!r} starts with none of the triggers")
        out.append((max(starts, key=len), schema, begin, end))
    return out


def json_text(text: str, what: str) -> Any:
    """`text` parsed; ValueError naming `what` when it is not JSON, or nests deeper than the parser goes (a
    RecursionError otherwise: a 500 for a schema sent as text where the same object gets a 400)."""
    try:
        return json.loads(text)
    except ValueError as exc:
        raise ValueError(f"{what} is not valid JSON: {exc}") from None
    except RecursionError:
        raise ValueError(f"{what} nests too deeply") from None


ENTRY_CHARS = 64
"""What a cached constraint costs beyond its text, counted as characters (its other fields, the entry)."""


def spec_chars(so: StructuredOutputs) -> int:
    """A constraint's size in characters (its text, its whitespace pattern and ENTRY_CHARS): what the caches
    of compiled constraints and of verdicts on them are bounded by."""
    return len(so.spec) + len(so.whitespace_pattern) + ENTRY_CHARS
