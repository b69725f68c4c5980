"""vLLM's spelling of a constraint: its `structured_outputs` fields, for the server and the Python API.

`from_vllm_fields` turns the fields of vLLM's `structured_outputs` (a request body's, or the
`StructuredOutputsParams` below) into one StructuredOutputs, with vLLM's meaning of each flag;
`StructuredOutputsParams` (and its older name `GuidedDecodingParams`) lets code written for vLLM's
`SamplingParams(structured_outputs=StructuredOutputsParams(json=schema))` run unchanged.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Any

from model_optimizer.runtime.structured.params import StructuredOutputs, json_text
from model_optimizer.runtime.structured.schema_walk import rebuilt


def closed(schema: Any, require_all: bool = False) -> Any:
    """vLLM's disable_additional_properties: `schema` with `additionalProperties: false` on every object
    schema that does not say (its own copy). `require_all`: OpenAI's strict-mode normalisation (the
    Responses API's default for function tools), which also makes every named property required."""
    return rebuilt(schema, functools.partial(_close, require_all=require_all))


def _close(node: dict, require_all: bool) -> dict:
    # vLLM's rule: an object with named properties is closed; a free-form one (`{"type": "object"}`, a map)
    # stays open, or it could only ever be {}
    if ("properties" in node or "patternProperties" in node) and "additionalProperties" not in node:
        node["additionalProperties"] = False
    if require_all and isinstance(node.get("properties"), dict):
        node["required"] = list(node["properties"])
    return node


def from_vllm_fields(
    json_schema: Any = None,
    regex: str | None = None,
    choice: list[str] | None = None,
    grammar: str | None = None,
    json_object: bool | None = None,
    structural_tag: Any = None,
    disable_any_whitespace: bool | None = None,
    whitespace_pattern: str | None = None,
    disable_additional_properties: bool | None = None,
) -> StructuredOutputs:
    """The constraint vLLM's `structured_outputs` fields describe (`json_schema` is its `json`: a schema
    as an object or JSON text); ValueError unless exactly one kind is given. JSON stays compact unless
    `disable_any_whitespace` is False (then bounded runs of whitespace); `whitespace_pattern` sets it
    instead; `disable_additional_properties` closes every object schema (`closed`)."""
    given = [
        (kind, value)
        for kind, value in (
            ("json", json_schema),
            ("regex", regex),
            ("choice", choice),
            ("grammar", grammar),
            ("structural_tag", structural_tag),
        )
        if value is not None
    ] + ([("json_object", True)] if json_object else [])
    if len(given) != 1:
        raise ValueError("set exactly one of json, regex, choice, grammar, json_object or structural_tag")
    kind, value = given[0]
    flexible = disable_any_whitespace is False  # compact unless asked otherwise
    pattern = whitespace_pattern or ""
    if disable_additional_properties:
        if kind != "json":
            raise ValueError(f"disable_additional_properties goes with json, not with {kind}")
        try:
            value = closed(json_text(value, "json") if isinstance(value, str) else value)
        except RecursionError:
            raise ValueError("json: the schema nests too deeply") from None
    if kind == "json_object":
        return StructuredOutputs.json_object(flexible, pattern)
    if kind == "json":
        return StructuredOutputs.json(value, flexible, pattern)
    if kind == "structural_tag":  # vLLM's is the tag's JSON text; an object works too
        tag = {"structural_tag": value, "whitespace_flexible": flexible, "whitespace_pattern": pattern}
        return StructuredOutputs.from_dict(tag)
    if pattern:
        raise ValueError(f"whitespace_pattern goes with json, not with {kind}")
    make = {"choice": StructuredOutputs.choice, "grammar": StructuredOutputs.grammar, "regex": StructuredOutputs.regex}
    return make[kind](value)


@dataclass
class StructuredOutputsParams:
    """vLLM's `StructuredOutputsParams`: one of `json` (a schema, as a dict or JSON text), `regex`,
    `choice`, `grammar`, `json_object`, `structural_tag`, and the flags vLLM has. Give it to
    `SamplingParams(structured_outputs=...)` (or `guided_decoding=`, vLLM's older name), which turns it
    into a `StructuredOutputs` at once, so a mistake is a ValueError there."""

    json: Any = None
    regex: str | None = None
    choice: list[str] | None = None
    grammar: str | None = None
    json_object: bool | None = None
    disable_fallback: bool = False
    """Taken and ignored: there is one grammar engine, and no fallback to another."""
    disable_any_whitespace: bool | None = None
    """False allows whitespace between JSON tokens (runs of up to 16), True or None (left out) makes JSON
    compact, as the server does with the field left out. (vLLM defaults to False: whitespace allowed,
    which small models spend their budget on.)"""
    disable_additional_properties: bool = False
    whitespace_pattern: str | None = None
    structural_tag: Any = None
    backend: str | None = None
    """GuidedDecodingParams' field: taken and ignored (one backend, llguidance)."""

    def to_structured_outputs(self) -> StructuredOutputs:
        return from_vllm_fields(
            self.json,
            self.regex,
            self.choice,
            self.grammar,
            self.json_object,
            self.structural_tag,
            self.disable_any_whitespace,
            self.whitespace_pattern,
            self.disable_additional_properties,
        )


GuidedDecodingParams = StructuredOutputsParams
"""vLLM's name before `structured_outputs` (SamplingParams' `guided_decoding`)."""
