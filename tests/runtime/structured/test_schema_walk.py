"""The one walk over a JSON schema's subschemas (structured/schema_walk.py) and the passes built on it."""

from __future__ import annotations

import json

from model_optimizer.runtime.structured.json_schema import prepare
from model_optimizer.runtime.structured.schema_walk import rebuilt, subschemas
from model_optimizer.runtime.structured.vllm_params import closed

SCHEMA = {
    "type": "object",
    "properties": {
        "const": {"type": "string"},  # a property named as a keyword: a schema
        "tags": {"type": "array", "items": {"type": "object", "properties": {"k": {}}}},
    },
    "unevaluatedProperties": {"properties": {"x": {}}},  # a keyword no pass names
    "dependencies": {"a": ["b"], "c": {"properties": {"d": {}}}},
    "default": {"properties": {"not": "a schema"}},
    "enum": [{"properties": {}}],
}


def test_subschemas_visits_every_schema_object_once_and_never_data():
    seen = list(subschemas(SCHEMA))
    assert seen[0] is SCHEMA
    assert len(seen) == len({id(node) for node in seen})
    props = SCHEMA["properties"]
    inside = [props["const"], props["tags"], props["tags"]["items"], props["tags"]["items"]["properties"]["k"]]
    inside += [SCHEMA["unevaluatedProperties"], SCHEMA["dependencies"]["c"]]
    for node in inside:
        assert any(node is other for other in seen)
    assert not any(node is SCHEMA["default"] or node is SCHEMA["enum"][0] for node in seen)
    assert not any(node is props for node in seen)  # a map of names is no schema


def test_rebuilt_changes_schemas_bottom_up_on_a_copy():
    before = json.dumps(SCHEMA)
    order: list[str] = []

    def mark(node: dict) -> dict:
        order.append(node.get("type", "?"))
        node["seen"] = True
        return node

    out = rebuilt(SCHEMA, mark)
    assert json.dumps(SCHEMA) == before  # the input is not changed
    assert out["seen"] and out["properties"]["tags"]["items"]["seen"] and out["dependencies"]["c"]["seen"]
    assert "seen" not in out["default"] and "seen" not in out["enum"][0]
    assert order[-1] == "object" and order.index("array") > order.index("string")  # subschemas first


def test_passes_reach_keywords_they_do_not_name():
    out = closed(SCHEMA)
    assert out["unevaluatedProperties"]["additionalProperties"] is False
    assert out["dependencies"]["c"]["additionalProperties"] is False
    assert out["dependencies"]["a"] == ["b"]
    assert "additionalProperties" not in out["default"]
    tightened = prepare({"contentSchema": {"type": "string", "format": "date"}})
    assert "pattern" in tightened["contentSchema"]


def test_a_schema_hundreds_of_levels_deep_is_rebuilt():
    """One frame per level (names maps taken inline): 400 levels of properties, past what Python's default
    recursion limit allowed at two frames a level."""
    node: dict = {"type": "string"}
    for _ in range(400):
        node = {"type": "object", "properties": {"a": node}}
    out = closed(node)
    for _ in range(400):
        assert out["additionalProperties"] is False
        out = out["properties"]["a"]
