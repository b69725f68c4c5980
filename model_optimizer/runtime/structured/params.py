"""StructuredOutputs: the constraint a request puts on its output, as plain data.

It travels inside SamplingParams from the frontend to the engine core (msgpack through msgspec,
which rebuilds it with the same checks), so it holds only strings and a flag: the grammar engine
(llguidance) is imported where grammars are compiled (grammar.py), never here.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

KINDS = ("json", "json_object", "regex", "choice", "grammar")
"""json: a JSON schema; json_object: any JSON object; regex: a regular expression the whole output
matches; choice: one of a list of strings; grammar: a context-free grammar (Lark, or llama.cpp's GBNF)."""


@dataclass(frozen=True)
class StructuredOutputs:
    """One constraint on a request's output (vLLM's `structured_outputs`); frozen, so it is its own cache key.

    Build one with `StructuredOutputs.json(schema)`, `.json_object()`, `.regex(pattern)`,
    `.choice(options)` or `.grammar(text)`."""

    kind: str
    """One of KINDS."""
    spec: str = ""
    """json: the schema as JSON text; choice: the options as a JSON list of strings; regex: the
    pattern; grammar: the grammar text; json_object: empty."""
    whitespace_flexible: bool = False
    """JSON kinds only: allow a run of up to grammar.WHITESPACE_RUN whitespace characters between JSON
    tokens (enough to pretty-print). Off, JSON comes out compact, as OpenAI's structured outputs return
    it: small models given free whitespace tend to spend their whole budget on it."""

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(f"structured output kind must be one of {', '.join(KINDS)}, got {self.kind!r}")
        if not isinstance(self.spec, str):
            raise ValueError(f"structured output spec must be a string, got {type(self.spec).__name__}")
        if not isinstance(self.whitespace_flexible, bool):
            raise ValueError("whitespace_flexible must be true or false")
        if self.kind == "json":
            schema = _json(self.spec, "the JSON schema")
            if not isinstance(schema, (dict, bool)):
                raise ValueError("a JSON schema must be an object (or true/false)")
        elif self.kind == "choice":
            options = _json(self.spec, "the choices")
            if not isinstance(options, list) or not options or not all(isinstance(o, str) and o for o in options):
                raise ValueError("choice must be a non-empty list of non-empty strings")
        elif self.kind in ("regex", "grammar") and not self.spec:
            raise ValueError(f"{self.kind} must not be empty")

    @classmethod
    def json(cls, schema: dict | bool | str, whitespace_flexible: bool = False) -> StructuredOutputs:
        text = schema if isinstance(schema, str) else json.dumps(schema, separators=(",", ":"))
        return cls("json", text, whitespace_flexible)

    @classmethod
    def json_object(cls, whitespace_flexible: bool = False) -> StructuredOutputs:
        return cls("json_object", "", whitespace_flexible)

    @classmethod
    def regex(cls, pattern: str) -> StructuredOutputs:
        return cls("regex", pattern)

    @classmethod
    def choice(cls, options: list[str]) -> StructuredOutputs:
        return cls("choice", json.dumps(list(options)))

    @classmethod
    def grammar(cls, text: str) -> StructuredOutputs:
        return cls("grammar", text)

    @classmethod
    def from_dict(cls, value: dict[str, Any]) -> StructuredOutputs:
        """From vLLM's dict shape: exactly one of json, regex, choice, grammar, json_object (true), and
        optionally whitespace_flexible (the Python API's, `mopt generate`'s JSONL lines)."""
        kinds = {"json", "regex", "choice", "grammar", "json_object"}
        unknown = set(value) - kinds - {"whitespace_flexible"}
        if unknown:
            raise ValueError(
                f"structured_outputs keys are {', '.join(sorted(kinds))}, got {', '.join(sorted(unknown))}"
            )
        given = [k for k in sorted(kinds) if value.get(k) not in (None, False)]
        if len(given) != 1:
            raise ValueError("structured_outputs needs exactly one of json, regex, choice, grammar or json_object")
        kind, flexible = given[0], value.get("whitespace_flexible", False)
        if kind == "json":
            return cls.json(value["json"], flexible)
        if kind == "json_object":
            return cls.json_object(flexible)
        if kind == "choice":
            return cls.choice(value["choice"])
        return cls(kind, value[kind])

    def describe(self) -> str:
        """A short name for logs and errors: the kind and the first characters of the spec."""
        spec = self.spec if len(self.spec) <= 60 else self.spec[:57] + "..."
        return f"{self.kind} {spec}".strip()


def _json(text: str, what: str) -> Any:
    try:
        return json.loads(text)
    except ValueError as exc:
        raise ValueError(f"{what} is not valid JSON: {exc}") from None
